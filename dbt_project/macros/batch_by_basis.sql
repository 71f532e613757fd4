{#
  The batch model of a job defined in SQL (the models tidemark generates for your SQL jobs):
  the job's own query (var jobs[job].batch_sql) run twice over bronze, once over every distinct
  event (basis 'all', the truth) and once over the events the stream counted (basis 'on_time':
  at least one copy arrived ahead of its watermark, see classify_lateness). The query reads one
  relation per source, named after the stream, and `events` for a single source, each holding
  each distinct event once, as the stream's own query did. A job reconciled by day
  (recon_partition: a windowed job) gets each row's recon_date, and a run recomputes only the
  days from var recon_from[job] on (macros/recon_scope.sql).
#}
{% macro batch_by_basis(job) -%}
{%- set spec = var('jobs')[job] -%}
{%- set sources = spec['sources'] | list -%}

with
{% for source in sources %}
{{ source }}__classified as (

    {{ classify_lateness(job, ref('stg_' ~ source), source) }}

),

{{ source }}__all_distinct as (

    {{ distinct_events(source ~ '__classified', spec['source_columns'][source], spec['source_keys'][source]) }}

),

{{ source }}__distinct as (

    -- a run by day: the events the recomputed days' rows can hold (read back by the longest
    -- window), or every event
    select * from {{ source }}__all_distinct
    where {{ events_in_recon_scope(job, spec['sources'][source]) }}

),
{% endfor %}
{%- for basis, where in [('all', ''), ('on_time', ' where counted_by_stream')] %}
basis_{{ basis }} as (

    {%- set relations = {} -%}
    {%- for source in sources -%}
        {%- do relations.update({source: 'select * from ' ~ source ~ '__distinct' ~ where}) -%}
    {%- endfor -%}
    {%- if sources | length == 1 -%}
        {%- do relations.update({'events': 'select * from ' ~ sources[0]}) -%}
    {%- endif %}
    {{ with_relations(relations, spec['batch_sql']) }}

),
{% endfor %}
final as (

    select 'all' as basis, * from basis_all
    union all
    select 'on_time' as basis, * from basis_on_time

)

{% if spec.get('recon_partition') -%}
{{ batch_rows_in_scope(job) }}
{%- else -%}
select * from final
{%- endif %}
{%- endmacro %}

{# `sql` with the relations it reads defined in front, merged with its own WITH if it has one. #}
{% macro with_relations(relations, sql) -%}
{%- set defined = [] -%}
{%- for name, body in relations.items() -%}
    {%- do defined.append(name ~ ' as (' ~ body ~ ')') -%}
{%- endfor -%}
{%- set stripped = sql | trim -%}
{%- if stripped[:4] | lower == 'with' and stripped[4:5] in [' ', '\n', '\t', '\r'] -%}
with {{ defined | join(',\n') }},
{{ stripped[5:] }}
{%- else -%}
with {{ defined | join(',\n') }}
{{ stripped }}
{%- endif -%}
{%- endmacro %}
