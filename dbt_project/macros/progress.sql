{#
  ops/stream_progress as every model of one dbt invocation must see it: as of the version
  tidemark-dbt pinned (run var progress_version, macros/run_vars.sql; streams that keep running
  append rows while dbt runs), one row per batch (a batch replayed after a crash reports twice;
  the latest report is the one that committed). stg_stream_progress is this query; `relation`
  is the progress table.
#}
{% macro stream_progress_sql(relation) -%}
{%- set pinned = run_var('progress_version', none) -%}
{#- a rebuild's shadow reconciled as its job (tidemark-dbt --shadow): the shadow's rows under
    the job's name, in place of the live version's -#}
{%- set shadows = run_var('shadow_names', {}) -%}
with source as (

    select * from {{ relation }}
    {% if pinned is not none %}version as of {{ pinned }}{% endif %}

),

latest as (

    select
        *,
        row_number() over (partition by query_id, batch_id order by ts desc) as report_rank
    from source

),

final as (

    select
        {% if shadows -%}
        case
            {% for shadow, job in shadows.items() -%}
            when job = '{{ shadow }}' then '{{ job }}'
            {% endfor -%}
            else job
        end as job,
        {%- else -%}
        job,
        {%- endif %}
        query_id,
        run_id,
        batch_id,
        ts,
        num_input_rows,
        watermark,
        -- Spark drops a row as late against the previous batch's watermark (SPARK-40925); a
        -- checkpoint's batch 0 against the epoch, so an event dated before 1970 (year 0001)
        -- in the very first batch is late too
        coalesce(lag(watermark) over (partition by query_id order by batch_id),
                 if(batch_id = 0, timestamp'1970-01-01 00:00:00', null)) as late_threshold,
        rows_dropped_by_watermark,
        source_version_from,
        source_version_to,
        source_versions,
        -- a rollup of old batches (retention's fold): its rows' lateness is in
        -- stg_stream_late_rows, its late_threshold means nothing
        rolled_up_batches is not null as rolled_up,
        state_rows,
        state_memory_bytes,
        state_disk_bytes
    from latest
    where report_rank = 1
        {%- if shadows %} and job not in ({{ quoted(shadows.values()) }}){% endif %}

)

select * from final
{%- endmacro %}

{#
  on-run-start (dbt_project.yml): stg_stream_progress, a table, holds the pin of the invocation
  that last built it. An invocation that does not build it (a run of part of the graph: what the
  automation requested after an incremental run updated one gold table, or a model
  materialized alone from the UI) would read another run's position through it: batches its
  pinned gold versions hold would be missing, and their rows would show as unexplained. Every
  invocation that runs models re-creates the table with its own pin first.
#}
{% macro pin_stream_progress() -%}
{%- set uid = 'model.' ~ project_name ~ '.stg_stream_progress' -%}
{%- if execute and flags.WHICH in ('build', 'run') and uid in graph.nodes
      and uid not in selected_resources -%}
{%- set node = graph.nodes[uid] -%}
{%- do run_query('create schema if not exists ' ~ node.schema) -%}
{#- (a view of an older release: a table is not created over it) -#}
{%- set existing = adapter.get_relation(database=node.database, schema=node.schema,
                                        identifier=node.alias) -%}
{%- if existing is not none and existing.is_view -%}
{%- do run_query('drop view ' ~ node.schema ~ '.' ~ node.alias) -%}
{%- endif -%}
create or replace table {{ node.schema }}.{{ node.alias }} using delta as
{{ stream_progress_sql('delta.`' ~ lake_path('ops', 'stream_progress') ~ '`') }}
{%- endif -%}
{%- endmacro %}
