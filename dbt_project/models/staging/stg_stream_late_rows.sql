-- The bronze rows that batches folded by retention (a job's rollup row in stg_stream_progress)
-- dropped as late: with those batches' own late thresholds gone, the lateness replay reads
-- them here. Written by the maintenance job before the batches are folded
-- (streaming_jobs/operations/lineage.py).

with source as (

    select * from {{ source('lake', 'ops_stream_late_rows') }}
    {#- a rebuild's shadow reconciled as its job folds no batch: the live version's rows are
        not its own #}
    {%- if run_var('shadow_names', {}) %}
    where job not in ({{ quoted(run_var('shadow_names', {}).values()) }})
    {%- endif %}

),

final as (

    select
        job,
        source_table,
        batch_id,
        bronze_version,
        row_id,
        event_time,
        late_threshold,
        report_lost
    from source

)

select * from final
