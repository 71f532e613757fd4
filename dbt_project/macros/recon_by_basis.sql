{#
  The pieces of a recon model for a job whose late events change the keys, not only the values
  (change points, sessions, profiles, the join). Its batch model int_<job>__batch has one row
  per key per basis: 'all' (the definition over every distinct event: the truth) and 'on_time'
  (over the events the stream counted: what it could know).

  The stream must equal the on-time basis exactly; whatever separates the truth from the
  on-time basis was caused by late events. So:
    streamed row  = truth                          -> match
                  = on-time basis                  -> late_dropped
                  in neither basis                 -> missing_in_batch
                  otherwise (or the key twice)     -> value_mismatch
    key not streamed, not final yet (open_when)    -> window_open
                  in the on-time basis             -> missing_in_stream
                  only in the truth                -> late_dropped

  recon_by_basis(job, open_when) strings them together, and every recon model of such a job
  is that one call (models/recon/recon_<job>.sql, and the models tidemark generates):
    streamed, truth, on_time, stream_state  (import CTEs)
    from_stream  = classify_streamed(...)
    from_batch   = classify_not_streamed(..., open_when)
    final        = recon_rows(...)

  open_when: a condition on the truth row t, the on-time row o (either may be null) and the
  stream's state s (stream_watermark) saying the stream cannot have emitted the row yet.
#}

{# Streamed keys, each in the class its values earn against the two bases. #}
{% macro classify_streamed(job, streamed='streamed', truth='truth', on_time='on_time') -%}
{%- set spec = var('jobs')[job] -%}
{%- set keys = spec['keys'] -%}
{%- set measures = spec['measures'] -%}
    select
        {% for k in keys %}a.{{ k }},
        {% endfor %}{% for m in measures %}a.{{ m }} as stream_{{ m }},
        t.{{ m }} as batch_{{ m }},
        o.{{ m }} as batch_{{ m }}_on_time,
        {% endfor %}a.stream_rows,
        {% if spec.get('recon_partition') %}a.recon_date,
        {% endif %}case
            when a.stream_rows = 1 and t.{{ keys[0] }} is not null
                and {{ same_values('a', 't', job) }} then 'match'
            when a.stream_rows = 1 and o.{{ keys[0] }} is not null
                and {{ same_values('a', 'o', job) }} then 'late_dropped'
            when t.{{ keys[0] }} is null and o.{{ keys[0] }} is null then 'missing_in_batch'
            else 'value_mismatch'
        end as recon_class
    from {{ streamed }} as a
    left join {{ truth }} as t on {{ same_key('a', 't', keys) }}
    left join {{ on_time }} as o on {{ same_key('a', 'o', keys) }}
{%- endmacro %}

{# Keys the batch has and the stream does not: still open, missing, or only late events'. #}
{% macro classify_not_streamed(job, open_when, truth='truth', on_time='on_time',
                               streamed='streamed', stream_state='stream_state') -%}
{%- set spec = var('jobs')[job] -%}
{%- set keys = spec['keys'] -%}
{%- set measures = spec['measures'] -%}
    select
        {% for k in keys %}coalesce(t.{{ k }}, o.{{ k }}) as {{ k }},
        {% endfor %}{% for m in measures %}case when false then coalesce(t.{{ m }}, o.{{ m }}) end as stream_{{ m }},
        t.{{ m }} as batch_{{ m }},
        o.{{ m }} as batch_{{ m }}_on_time,
        {% endfor %}cast(null as bigint) as stream_rows,
        {% if spec.get('recon_partition') %}coalesce(t.recon_date, o.recon_date) as recon_date,
        {% endif %}case
            when s.stream_watermark is null or ({{ open_when }}) then 'window_open'
            when o.{{ keys[0] }} is not null then 'missing_in_stream'
            else 'late_dropped'
        end as recon_class
    from {{ truth }} as t
    full outer join {{ on_time }} as o on {{ same_key('t', 'o', keys) }}
    cross join {{ stream_state }} as s
    left anti join {{ streamed }} as a
        on {% for k in keys %}coalesce(t.{{ k }}, o.{{ k }}) <=> a.{{ k }}{% if not loop.last %} and {% endif %}{% endfor %}
{%- endmacro %}

{# The recon table's columns, from the classified relations. #}
{% macro recon_rows(job, classified, stream_state='stream_state') -%}
{%- set spec = var('jobs')[job] -%}
    select
        '{{ job }}' as job,
        {% for k in spec['keys'] %}c.{{ k }},
        {% endfor %}c.recon_class,
        {% for m in spec['measures'] %}c.stream_{{ m }},
        c.batch_{{ m }},
        c.batch_{{ m }}_on_time,
        {% if measure_is_numeric(job, m) %}c.stream_{{ m }} - c.batch_{{ m }}{% else %}cast(null as double){% endif %} as {{ m }}_diff,
        {% endfor %}c.stream_rows,
        s.stream_watermark,
        current_timestamp() as reconciled_at{% if spec.get('recon_partition') %},
        c.recon_date{% endif %}
    from ({% for relation in classified %}select * from {{ relation }}{% if not loop.last %} union all {% endif %}{% endfor %}) as c
    cross join {{ stream_state }} as s
{%- endmacro %}

{# The whole recon model in one call (for the models tidemark generates from a job's SQL). #}
{% macro recon_by_basis(
    job, open_when='coalesce(t.window_end, o.window_end) > s.stream_watermark'
) -%}

with streamed as (

    {{ streamed_by_key(job) }}

),

truth as (

    select * from {{ ref('int_' ~ job ~ '__batch') }}
    where basis = 'all' and {{ in_recon_scope(job) }}  -- the days this run recomputes

),

on_time as (

    select * from {{ ref('int_' ~ job ~ '__batch') }}
    where basis = 'on_time' and {{ in_recon_scope(job) }}

),

stream_state as (

    {{ stream_watermark(job) }}

),

from_stream as (

    {{ classify_streamed(job) }}

),

from_batch as (

    {{ classify_not_streamed(job, open_when) }}

),

final as (

    {{ recon_rows(job, ['from_stream', 'from_batch']) }}

)

select * from final
{%- endmacro %}

{# left.k <=> right.k for every key column #}
{% macro same_key(left, right, keys) -%}
{% for k in keys %}{{ left }}.{{ k }} <=> {{ right }}.{{ k }}{% if not loop.last %} and {% endif %}{% endfor %}
{%- endmacro %}

{#
  Every measure of left equal to right's: numbers within the job's tolerance, anything else
  exactly; both null counts as equal. A job without measures (a set of keys) has nothing to
  compare: true.
#}
{% macro same_values(left, right, job) -%}
{%- set spec = var('jobs')[job] -%}
{%- for m in spec['measures'] -%}
{%- if measure_is_numeric(job, m) -%}
coalesce(abs({{ left }}.{{ m }} - {{ right }}.{{ m }}) <= {{ spec['tolerance'] }}, {{ left }}.{{ m }} is null and {{ right }}.{{ m }} is null)
{%- else -%}
{{ left }}.{{ m }} <=> {{ right }}.{{ m }}
{%- endif -%}
{%- if not loop.last %} and {% endif -%}
{%- else -%}
true
{%- endfor -%}
{%- endmacro %}
