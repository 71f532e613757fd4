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
        sum(amount) as spend,
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
