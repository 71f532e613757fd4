{#
  Sessions of each user's events: a new session starts when an event comes more than
  `gap_seconds` after the previous one. Spark's session_window merges sessions that touch, so
  an event exactly one gap after the previous one still belongs to its session.
  A session spans [first event, last event + gap).
#}
{% macro sessionize(events, gap_seconds) -%}
    select
        user_id,
        min(event_time) as window_start,
        max(event_time) + make_interval(0, 0, 0, 0, 0, 0, {{ gap_seconds }}) as window_end,
        count(*) as clicks,
        (unix_micros(max(event_time)) - unix_micros(min(event_time))) / 1000000.0 as duration_seconds,
        -- summed exactly: an incremental run adds a session's clicks in another order
        cast(sum(cast(amount as decimal(38, 9))) as double) as spend,
        count_if(not counted_by_stream) as late_events
    from (
        select
            *,
            sum(starts_session) over (
                partition by user_id order by event_time, event_id
                rows between unbounded preceding and current row
            ) as session_number
        from (
            select
                *,
                case
                    when lag(event_time) over (partition by user_id order by event_time, event_id) is null
                        or unix_micros(event_time)
                           - unix_micros(lag(event_time) over (partition by user_id order by event_time, event_id))
                           > {{ gap_seconds * 1000000 }}
                    then 1 else 0
                end as starts_session
            from {{ events }}
        )
    )
    group by user_id, session_number
{%- endmacro %}

{#
  Per basis (all, and on_time: the clicks the stream counted) and user, the latest profile of a
  relation of distinct events: the last run of clicks with no pause longer than the TTL, as the
  stream's event-time timer forgets a user (measured in milliseconds, as the timer is).
#}
{% macro latest_profiles(events, ttl_millis) -%}
    select basis, user_id, count(*) as visits,
           -- summed exactly: an incremental run adds a profile's clicks in another order
           cast(sum(cast(amount as decimal(38, 9))) as double) as total_spend,
           min(event_time) as first_activity, max(event_time) as last_activity
    from (
        select *, max(epoch) over (partition by basis, user_id) as latest_epoch
        from (
            select
                *,
                sum(starts_epoch) over (
                    partition by basis, user_id order by event_time, event_id
                    rows between unbounded preceding and current row
                ) as epoch
            from (
                select
                    *,
                    case
                        when lag(event_time) over by_user is null
                            or unix_millis(event_time) - unix_millis(lag(event_time) over by_user)
                               > {{ ttl_millis }}
                        then 1 else 0
                    end as starts_epoch
                from (
                    -- each event once in basis all, and again in on_time when it was counted
                    select * from {{ events }}
                    {{ each_basis() }}
                )
                window by_user as (partition by basis, user_id order by event_time, event_id)
            )
        )
    )
    where epoch = latest_epoch
    group by basis, user_id
{%- endmacro %}
