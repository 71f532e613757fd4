{%- set job = 'user_activity_profile' -%}
{%- set ttl_seconds = job_param(job, 'ttl_seconds') | int -%}

-- Each user's latest profile: the last run of their distinct clicks, in event-time order, with
-- no pause longer than the TTL (a longer pause forgets the user). Once over all clicks (basis
-- all, the truth), once over the clicks the stream counted (basis on_time).

with events as (

    {{ classify_lateness(job, ref('stg_clicks')) }}

),

distinct_events as (

    {{ distinct_events('events', ['user_id', 'event_time', 'amount']) }}

),

based as (

    select 'all' as basis, * from distinct_events
    union all
    select 'on_time' as basis, * from distinct_events where counted_by_stream

),

marked as (

    select
        *,
        case
            when lag(event_time) over by_user is null
                or unix_millis(event_time) - unix_millis(lag(event_time) over by_user)
                   > {{ ttl_seconds * 1000 }}
            then 1 else 0
        end as starts_epoch
    from based
    window by_user as (partition by basis, user_id order by event_time, event_id)

),

numbered as (

    select
        *,
        sum(starts_epoch) over (
            partition by basis, user_id order by event_time, event_id
            rows between unbounded preceding and current row
        ) as epoch
    from marked

),

epochs as (

    select
        basis,
        user_id,
        epoch,
        count(*) as visits,
        sum(amount) as total_spend,
        min(event_time) as first_activity,
        max(event_time) as last_activity,
        max(epoch) over (partition by basis, user_id) as latest_epoch
    from numbered
    group by basis, user_id, epoch

),

final as (

    select
        basis,
        user_id,
        visits,
        total_spend,
        (unix_millis(last_activity) - unix_millis(first_activity)) / 1000.0 as active_seconds,
        first_activity,
        last_activity,
        last_activity + make_interval(0, 0, 0, 0, 0, 0, {{ ttl_seconds }}) as expires_at
    from epochs
    where epoch = latest_epoch

)

select * from final
