-- One snapshot of the progress for the whole dbt invocation (var progress_version, set by
-- tidemark-dbt): streams that keep running append rows while dbt runs, and every model must
-- see the same batches.
{% set pinned = var('progress_version', none) %}

with source as (

    select * from {{ source('lake', 'ops_stream_progress') }}
    {% if pinned is not none %}version as of {{ pinned }}{% endif %}

),

-- a batch replayed after a crash reports twice; the latest report is the one that committed
latest as (

    select
        *,
        row_number() over (partition by query_id, batch_id order by ts desc) as report_rank
    from source

),

final as (

    select
        job,
        query_id,
        run_id,
        batch_id,
        ts,
        num_input_rows,
        watermark,
        -- Spark drops a row as late against the previous batch's watermark (SPARK-40925)
        lag(watermark) over (partition by query_id order by batch_id) as late_threshold,
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

)

select * from final
