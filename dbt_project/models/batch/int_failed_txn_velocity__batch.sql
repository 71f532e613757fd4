{%- set job = 'failed_txn_velocity' -%}
{%- set window_seconds = job_param(job, 'window_seconds') | int -%}
{%- set slide_seconds = job_param(job, 'slide_seconds') | int -%}

with events as (

    {{ classify_lateness(job, ref('stg_transactions')) }}

),

-- the truth: every distinct event, whenever it arrived
all_events as (

    select * from (
        select *, row_number() over (partition by event_id order by bronze_version) as copy
        from events
    )
    where copy = 1

),

-- what the stream can know: distinct events that were not behind its watermark
on_time_events as (

    select * from (
        select *, row_number() over (partition by event_id order by bronze_version) as copy
        from events
        where not is_late
    )
    where copy = 1

),

all_windows as (

    select
        user_id,
        {{ sliding_window_starts('event_time', window_seconds, slide_seconds) }} as window_start,
        count(*) as failed_count
    from all_events
    lateral view explode(sequence(0, {{ (window_seconds // slide_seconds) - 1 }})) panes as k
    where status = 'FAILED'
    group by 1, 2

),

on_time_windows as (

    select
        user_id,
        {{ sliding_window_starts('event_time', window_seconds, slide_seconds) }} as window_start,
        count(*) as failed_count
    from on_time_events
    lateral view explode(sequence(0, {{ (window_seconds // slide_seconds) - 1 }})) panes as k
    where status = 'FAILED'
    group by 1, 2

),

final as (

    select
        all_windows.user_id,
        all_windows.window_start,
        all_windows.window_start + make_interval(0, 0, 0, 0, 0, 0, {{ window_seconds }}) as window_end,
        all_windows.failed_count,
        coalesce(on_time_windows.failed_count, 0) as failed_count_on_time
    from all_windows
    left join on_time_windows
        on all_windows.user_id = on_time_windows.user_id
        and all_windows.window_start = on_time_windows.window_start

)

select * from final
