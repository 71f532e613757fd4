{%- set job = 'failed_txn_velocity' -%}
{{ config(materialized='recon_partitions', recon_job=job) }}
{%- set window_ms = (job_param(job, 'window_seconds') | int) * 1000 -%}
{%- set slide_ms = (job_param(job, 'slide_seconds') | int) * 1000 -%}

-- The stream's output is the change points of each user's FAILED count over sliding windows.
-- Recomputed here without windows: every FAILED event adds +1 to the windows ending from its
-- pane's end on, and -1 from one window length later; a running sum of those steps per user is
-- the count, and a step that does not sum to 0 is a change point. Once over all distinct events
-- (basis all, the truth), once over those the stream counted (basis on_time).

with events as (

    {{ classify_lateness(job, ref('stg_transactions')) }}

),

distinct_events as (

    {{ distinct_events('events', ['user_id', 'status', 'event_time']) }}

),

failed_panes as (

    select
        user_id,
        counted_by_stream,
        floor(unix_millis(event_time) / {{ slide_ms }}) * {{ slide_ms }} as pane_ms
    from distinct_events
    where status = 'FAILED'

),

based as (

    select
        basis,
        user_id,
        pane_ms
    from failed_panes
        {{ each_basis() }}

),

steps as (

    select
        basis,
        user_id,
        pane_ms + {{ slide_ms }} as end_ms,
        1 as step
    from based
    union all
    select
        basis,
        user_id,
        pane_ms + {{ window_ms + slide_ms }} as end_ms,
        -1 as step
    from based

),

net_steps as (

    select
        basis,
        user_id,
        end_ms,
        sum(step) as step
    from steps
    group by basis, user_id, end_ms

),

running as (

    select
        *,
        sum(step) over (
            partition by basis, user_id order by end_ms
            rows between unbounded preceding and current row
        ) as failed_count
    from net_steps

),

final as (

    select
        basis,
        user_id,
        timestamp_millis(end_ms - {{ window_ms }}) as window_start,
        timestamp_millis(end_ms) as window_end,
        failed_count
    from running
    where step <> 0

)

{{ batch_rows_in_scope(job) }}
