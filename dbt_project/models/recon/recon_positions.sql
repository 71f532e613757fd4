{{ config(materialized='incremental', incremental_strategy='append',
          on_schema_change='append_new_columns') }}
{#- only the jobs whose recon model this invocation builds: a run of part of the graph (what
    the automation requested after some gold tables changed, one job's models) must not move
    another job's position past events its recon table has not seen; a job left out because
    nothing new reached it keeps its last record -#}
{%- set positions = [] %}
{%- for p in run_var('recon_positions', []) %}
    {%- if ('model.' ~ project_name ~ '.recon_' ~ p.job) in selected_resources %}
        {%- do positions.append(p) %}
    {%- endif %}
{%- endfor %}

-- Where each job's reconciliation got to: per job and source, the bronze version the streams
-- had read (pinned for this invocation by tidemark-dbt), the stream's checkpoint query id and
-- the fingerprint of the project and the job's parameters, the first day still holding
-- window_open rows, and the job's last stream batch (none since: no open window can have
-- closed, and the job is left out of the next run if nothing new reached it either). Built
-- after every recon model, so a run that fails records nothing. The next run recomputes only
-- the days its new events can change (orchestration/recon/recon_scope.py).
{% for job in var('jobs') %}
-- depends_on: {{ ref('recon_' ~ job) }}
{%- endfor %}

with positions as (

    {% if positions -%}
    select * from
        values
        {% for p in positions -%}
        (
            '{{ p.job }}', '{{ p.source }}', cast({{ p.version_to }} as bigint),
            '{{ p.query_id }}', '{{ p.fingerprint }}',
            cast({{ p.batch_id if p.batch_id is not none else 'null' }} as bigint)
        ){% if not loop.last %},{% endif %}
        {% endfor -%}
            -- the alias names the values' columns
            as t (job, source, version_to, query_id, fingerprint, batch_id)  -- noqa: AL05
    {%- else -%}
    select
        cast(null as string) as job,
        cast(null as string) as source,
        cast(null as bigint) as version_to,
        cast(null as string) as query_id,
        cast(null as string) as fingerprint,
        cast(null as bigint) as batch_id
    where false
    {%- endif %}

),

still_open as (

    {#- the jobs recorded here only: another job's recon table may not exist yet #}
    {%- set recorded = positions | map(attribute='job') | unique | list %}
    {% for job, spec in var('jobs').items() if job in recorded %}
    {% if spec.get('recon_partition') -%}
    select '{{ job }}' as job, min(recon_date) as open_from
    from {{ ref('recon_' ~ job) }}
    where recon_class = 'window_open'
    {%- else -%}
    select '{{ job }}' as job, cast(null as date) as open_from
    {%- endif %}
    {% if not loop.last %}union all{% endif %}
    {% else %}
    select
        cast(null as string) as job,
        cast(null as date) as open_from
    where false
    {% endfor %}

),

final as (

    select
        positions.job,
        positions.source,
        positions.version_to,
        positions.query_id,
        positions.fingerprint,
        still_open.open_from,
        '{{ invocation_id }}' as invocation_id,
        current_timestamp() as reconciled_at,
        -- last: a table recorded before it had the column gets it appended at the end
        positions.batch_id
    from positions
    left join still_open on positions.job = still_open.job

)

select * from final
