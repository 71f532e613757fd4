{%- set job = 'failed_txn_velocity' -%}
{%- set tolerance = job_param(job, 'tolerance') -%}

with streamed as (

    -- a key present twice in gold is a defect: summed here and flagged by stream_rows
    select
        user_id,
        window_start,
        window_end,
        sum(failed_count) as failed_count,
        count(*) as stream_rows
    from {{ source('lake', 'gold_failed_txn_velocity') }}
    group by 1, 2, 3

),

batched as (

    select * from {{ ref('int_failed_txn_velocity__batch') }}

),

stream_state as (

    select max(watermark) as stream_watermark
    from {{ ref('stg_stream_progress') }}
    where job = '{{ job }}'

),

joined as (

    select
        coalesce(streamed.user_id, batched.user_id) as user_id,
        coalesce(streamed.window_start, batched.window_start) as window_start,
        coalesce(streamed.window_end, batched.window_end) as window_end,
        streamed.failed_count as stream_failed_count,
        batched.failed_count as batch_failed_count,
        batched.failed_count_on_time as batch_failed_count_on_time,
        streamed.stream_rows
    from streamed
    full outer join batched
        on streamed.user_id = batched.user_id
        and streamed.window_start = batched.window_start
        and streamed.window_end = batched.window_end

),

classified as (

    select
        joined.*,
        stream_state.stream_watermark,
        case
            -- append mode emits a window once the watermark passes its end
            when joined.stream_failed_count is null
                and (stream_state.stream_watermark is null
                     or joined.window_end > stream_state.stream_watermark)
                then 'window_open'
            when joined.stream_failed_count is null
                and coalesce(joined.batch_failed_count_on_time, 0) = 0
                then 'late_dropped'
            when joined.stream_failed_count is null then 'missing_in_stream'
            when joined.batch_failed_count is null then 'missing_in_batch'
            when joined.stream_rows = 1
                and abs(joined.stream_failed_count - joined.batch_failed_count) <= {{ tolerance }}
                then 'match'
            when joined.stream_rows = 1
                and abs(joined.stream_failed_count - joined.batch_failed_count_on_time) <= {{ tolerance }}
                then 'late_dropped'
            else 'value_mismatch'
        end as recon_class
    from joined
    cross join stream_state

),

final as (

    select
        '{{ job }}' as job,
        user_id,
        window_start,
        window_end,
        recon_class,
        stream_failed_count,
        batch_failed_count,
        batch_failed_count_on_time,
        stream_failed_count - batch_failed_count as failed_count_diff,
        stream_rows,
        stream_watermark,
        current_timestamp() as reconciled_at
    from classified

)

select * from final
