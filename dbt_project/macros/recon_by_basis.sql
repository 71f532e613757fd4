{#
  Recon of a job whose late events change the keys, not only the values (change points,
  sessions, profiles): its batch model int_<job>__batch has one row per key per basis, 'all'
  (the definition over every distinct event: the truth) and 'on_time' (over the events the
  stream counted: what it could know).

  The stream must equal the on-time basis exactly; whatever separates the truth from the
  on-time basis was caused by late events. So:
    streamed row  = truth                          -> match
                  = on-time basis                  -> late_dropped
                  in neither basis                 -> missing_in_batch
                  otherwise (or the key twice)     -> value_mismatch
    key not streamed, not final yet (open_when)    -> window_open
                  in the on-time basis             -> missing_in_stream
                  only in the truth                -> late_dropped

  open_when: a condition on the truth row t, the on-time row o (either may be null) and the
  stream's state s (stream_watermark) saying the stream cannot have emitted the row yet.
  Windows and sessions: their end is after the watermark (append mode emits a row once the
  watermark passes its end).
#}
{% macro recon_by_basis(job, open_when='coalesce(t.window_end, o.window_end) > s.stream_watermark') -%}
{%- set spec = var('jobs')[job] -%}
{%- set keys = spec['keys'] -%}
{%- set measures = spec['measures'] -%}
{%- set tolerance = spec['tolerance'] -%}

with streamed as (

    {{ streamed_by_key(job, keys, measures) }}

),

truth as (select * from {{ ref('int_' ~ job ~ '__batch') }} where basis = 'all'),

on_time as (select * from {{ ref('int_' ~ job ~ '__batch') }} where basis = 'on_time'),

stream_state as (

    {{ stream_watermark(job) }}

),

from_stream as (

    select
        {% for k in keys %}a.{{ k }},
        {% endfor %}{% for m in measures %}a.{{ m }} as stream_{{ m }},
        t.{{ m }} as batch_{{ m }},
        o.{{ m }} as batch_{{ m }}_on_time,
        {% endfor %}a.stream_rows,
        case
            when a.stream_rows = 1 and t.{{ keys[0] }} is not null
                and {{ same_values('a', 't', measures, tolerance) }} then 'match'
            when a.stream_rows = 1 and o.{{ keys[0] }} is not null
                and {{ same_values('a', 'o', measures, tolerance) }} then 'late_dropped'
            when t.{{ keys[0] }} is null and o.{{ keys[0] }} is null then 'missing_in_batch'
            else 'value_mismatch'
        end as recon_class
    from streamed as a
    left join truth as t on {{ same_key('a', 't', keys) }}
    left join on_time as o on {{ same_key('a', 'o', keys) }}

),

-- keys the stream does not have, with the value of each basis that has them
not_streamed as (

    select
        {% for k in keys %}coalesce(t.{{ k }}, o.{{ k }}) as {{ k }},
        {% endfor %}{% for m in measures %}t.{{ m }} as batch_{{ m }},
        o.{{ m }} as batch_{{ m }}_on_time,
        {% endfor %}o.{{ keys[0] }} is not null as in_on_time,
        s.stream_watermark is null or ({{ open_when }}) as is_open
    from truth as t
    full outer join on_time as o on {{ same_key('t', 'o', keys) }}
    cross join stream_state as s
    left anti join streamed as a
        on {% for k in keys %}coalesce(t.{{ k }}, o.{{ k }}) <=> a.{{ k }}{% if not loop.last %} and {% endif %}{% endfor %}

),

from_batch as (

    select
        {% for k in keys %}b.{{ k }},
        {% endfor %}{% for m in measures %}cast(null as double) as stream_{{ m }},
        b.batch_{{ m }},
        b.batch_{{ m }}_on_time,
        {% endfor %}cast(null as bigint) as stream_rows,
        case
            when b.is_open then 'window_open'
            when b.in_on_time then 'missing_in_stream'
            else 'late_dropped'
        end as recon_class
    from not_streamed as b

),

classified as (

    select * from from_stream
    union all
    select * from from_batch

),

final as (

    select
        '{{ job }}' as job,
        {% for k in keys %}classified.{{ k }},
        {% endfor %}classified.recon_class,
        {% for m in measures %}classified.stream_{{ m }},
        classified.batch_{{ m }},
        classified.batch_{{ m }}_on_time,
        classified.stream_{{ m }} - classified.batch_{{ m }} as {{ m }}_diff,
        {% endfor %}classified.stream_rows,
        stream_state.stream_watermark,
        current_timestamp() as reconciled_at
    from classified
    cross join stream_state

)

select * from final
{%- endmacro %}

{# left.k <=> right.k for every key column #}
{% macro same_key(left, right, keys) -%}
{% for k in keys %}{{ left }}.{{ k }} <=> {{ right }}.{{ k }}{% if not loop.last %} and {% endif %}{% endfor %}
{%- endmacro %}

{# every measure of left within tolerance of right's (both null counts as equal) #}
{% macro same_values(left, right, measures, tolerance) -%}
{% for m in measures %}coalesce(abs({{ left }}.{{ m }} - {{ right }}.{{ m }}) <= {{ tolerance }}, {{ left }}.{{ m }} is null and {{ right }}.{{ m }} is null){% if not loop.last %} and {% endif %}{% endfor %}
{%- endmacro %}
