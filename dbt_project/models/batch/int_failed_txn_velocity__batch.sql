{%- set job = 'failed_txn_velocity' -%}
{%- set window_seconds = job_param(job, 'window_seconds') | int -%}
{%- set slide_seconds = job_param(job, 'slide_seconds') | int -%}

with events as (

    {{ classify_lateness(job, ref('stg_transactions')) }}

),

-- one row per distinct event (copies are exact duplicates); the stream counted it if at least
-- one copy arrived ahead of its watermark
distinct_events as (

    select
        event_id,
        min_by(user_id, bronze_version) as user_id,
        min_by(status, bronze_version) as status,
        min_by(event_time, bronze_version) as event_time,
        bool_or(not is_late) as counted_by_stream
    from events
    group by event_id

),

windows as (

    select
        user_id,
        {{ sliding_window_starts('event_time', window_seconds, slide_seconds) }} as window_start,
        count(*) as failed_count,
        count_if(counted_by_stream) as failed_count_on_time
    from distinct_events
    lateral view explode(sequence(0, {{ (window_seconds // slide_seconds) - 1 }})) panes as k
    where status = 'FAILED'
    group by 1, 2

),

final as (

    select
        user_id,
        window_start,
        window_start + make_interval(0, 0, 0, 0, 0, 0, {{ window_seconds }}) as window_end,
        failed_count,
        failed_count_on_time
    from windows

)

select * from final
