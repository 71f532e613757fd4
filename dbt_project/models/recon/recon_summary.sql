{{ config(materialized='incremental', incremental_strategy='append') }}

-- History: every reconciliation run appends one row per job.

with recon as (

    {% for job in var('jobs') %}
    select job, recon_class, stream_watermark from {{ ref('recon_' ~ job) }}
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
        count_if(recon_class = 'match') as match_rows,
        count_if(recon_class = 'value_mismatch') as value_mismatch_rows,
        count_if(recon_class = 'missing_in_stream') as missing_in_stream_rows,
        count_if(recon_class = 'missing_in_batch') as missing_in_batch_rows,
        count_if(recon_class = 'window_open') as window_open_rows,
        count_if(recon_class = 'late_dropped') as late_dropped_rows,
        max(stream_watermark) as stream_watermark
    from recon
    group by job

),

final as (

    select
        counts.job,
        '{{ invocation_id }}' as invocation_id,
        current_timestamp() as reconciled_at,
        counts.rows_compared,
        counts.match_rows,
        counts.value_mismatch_rows,
        counts.missing_in_stream_rows,
        counts.missing_in_batch_rows,
        counts.window_open_rows,
        counts.late_dropped_rows,
        counts.value_mismatch_rows + counts.missing_in_stream_rows + counts.missing_in_batch_rows
            as unexplained_rows,
        late.late_events_replayed,
        late.late_events_reported,
        counts.stream_watermark
    from counts
    left join late on counts.job = late.job

)

select * from final
