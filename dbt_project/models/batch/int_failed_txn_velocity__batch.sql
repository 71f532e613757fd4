{%- set job = 'failed_txn_velocity' -%}
{%- set window_seconds = job_param(job, 'window_seconds') | int -%}
{%- set slide_seconds = job_param(job, 'slide_seconds') | int -%}

with events as (

    {{ classify_lateness(job, ref('stg_transactions')) }}

),

distinct_events as (

    {{ distinct_events('events', ['user_id', 'status', 'event_time']) }}

),

windows as (

    select
        user_id,
        {{ sliding_window_starts('event_time', window_seconds, slide_seconds) }} as window_start,
        count(*) as failed_count,
        count_if(counted_by_stream) as failed_count_on_time,
        count_if(counted_by_stream) as events_on_time
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
        failed_count_on_time,
        events_on_time
    from windows

)

select * from final
