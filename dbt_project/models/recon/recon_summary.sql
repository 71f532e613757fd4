{{ config(materialized='incremental', incremental_strategy='append',
          on_schema_change='append_new_columns') }}

-- History: every reconciliation run appends one row per job it reconciled, also for a job with
-- no row to compare yet (its counts are 0: it has not streamed, or its windows are all still
-- open).
--
-- The jobs it reconciled are those whose recon model this invocation builds. A run of part of
-- the graph (one job's models, or what the automation requested while an incremental run had
-- updated some gold tables only) appends rows for those jobs alone: another job's recon table
-- was built by an earlier run from other positions, and its counts under this run's timestamp
-- and late-event counts would mix two states. Building the summary alone summarizes every job.
-- A job that nothing new reached since its last reconciliation (recon_from '9999-12-31', left
-- out of the run by tidemark-dbt) counts as reconciled: its table is current at this run's
-- positions.
-- (every recon model is a dependency, whatever a run reconciles: dbt records refs at parse
-- time, when the vars may already leave some jobs out)
{% for job in var('jobs') %}
-- depends_on: {{ ref('recon_' ~ job) }}
{%- endfor %}
{%- set reconciled = [] %}
{%- for job in var('jobs') %}
    {%- if ('model.' ~ project_name ~ '.recon_' ~ job) in selected_resources
           or run_var('recon_from', {}).get(job) == '9999-12-31' %}
        {%- do reconciled.append(job) %}
    {%- endif %}
{%- endfor %}
{%- if not reconciled %}
{%- set reconciled = var('jobs') | list %}
{%- endif %}

with jobs as (

    select t.job
    from
        values
        {% for job in reconciled -%}
        ('{{ job }}'){% if not loop.last %},{% endif %}
        {% endfor %}
            as t (job)

),

recon as (

    {% for job in reconciled %}
    select
        job,
        recon_class,
        stream_watermark
    from {{ ref('recon_' ~ job) }}
    {% if not loop.last %}union all{% endif %}
    {% endfor %}

),

late as (

    select * from {{ ref('int_late_events') }}

),

counts as (

    select
        job,
        count(*) as rows_compared,
        {% for class in recon_classes() %}count_if(recon_class = '{{ class }}') as {{ class }}_rows,
        {% endfor %}count_if(recon_class in ({{ quoted(var('recon_classes')['unexplained']) }}))
            as unexplained_rows,
        max(stream_watermark) as stream_watermark
    from recon
    group by job

),

final as (

    select
        jobs.job,
        '{{ invocation_id }}' as invocation_id,
        current_timestamp() as reconciled_at,
        coalesce(counts.rows_compared, 0) as rows_compared,
        {% for class in recon_classes() %}coalesce(counts.{{ class }}_rows, 0) as {{ class }}_rows,
        {% endfor %}coalesce(counts.unexplained_rows, 0) as unexplained_rows,
        late.late_events_replayed,
        late.late_events_reported,
        counts.stream_watermark,
        late.late_events_report_lost
    from jobs
    left join counts on jobs.job = counts.job
    left join late on jobs.job = late.job

)

select * from final
