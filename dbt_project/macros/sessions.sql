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

{#
  Recon of a session job. Late events do not only change a session's values, they merge
  sessions, so truth and stream keys can differ: the stream's sessions are judged against the
  sessions of the events it could know (basis on_time), the truth's against the stream.
#}
{% macro recon_sessions(job) -%}
{%- set spec = var('jobs')[job] -%}
{%- set keys = spec['keys'] -%}
{%- set measures = spec['measures'] -%}
{%- set tolerance = spec['tolerance'] -%}
{%- set on_keys -%}
{% for k in keys %}a.{{ k }} = b.{{ k }}{% if not loop.last %} and {% endif %}{% endfor %}
{%- endset -%}

with streamed as (

    {{ streamed_by_key(job, keys, measures) }}

),

truth as (select * from {{ ref('int_' ~ job ~ '__batch') }} where basis = 'all'),

on_time as (select * from {{ ref('int_' ~ job ~ '__batch') }} where basis = 'on_time'),

stream_state as (

    {{ stream_watermark(job) }}

),

from_stream as (

    select
        a.*,
        case
            when a.stream_rows = 1 and t.user_id is not null
                {% for m in measures %}and abs(a.{{ m }} - t.{{ m }}) <= {{ tolerance }}
                {% endfor %}then 'match'
            when a.stream_rows = 1 and o.user_id is not null
                {% for m in measures %}and abs(a.{{ m }} - o.{{ m }}) <= {{ tolerance }}
                {% endfor %}then 'late_dropped'
            when t.user_id is null and o.user_id is null then 'missing_in_batch'
            else 'value_mismatch'
        end as recon_class
    from streamed as a
    left join truth as t on {{ on_keys | replace('b.', 't.') }}
    left join on_time as o on {{ on_keys | replace('b.', 'o.') }}

),

-- sessions the stream does not have: the truth's, then the on-time ones the truth lacks
not_streamed as (

    select b.*, 'all' as side from truth as b left anti join streamed as a on {{ on_keys }}
    union all
    select b.*, 'on_time' as side from on_time as b
    left anti join streamed as a on {{ on_keys }}
    left anti join truth as t on {{ on_keys | replace('a.', 't.') }}

),

from_batch as (

    select
        {% for k in keys %}b.{{ k }},
        {% endfor %}{% for m in measures %}cast(null as double) as {{ m }},
        {% endfor %}cast(null as bigint) as stream_rows,
        case
            when s.stream_watermark is null or b.window_end > s.stream_watermark then 'window_open'
            when b.side = 'all' and b.late_events > 0 then 'late_dropped'
            else 'missing_in_stream'
        end as recon_class
    from not_streamed as b
    cross join stream_state as s

),

final as (

    select
        '{{ job }}' as job,
        classified.*,
        stream_state.stream_watermark,
        current_timestamp() as reconciled_at
    from (
        select {{ keys | join(', ') }}, recon_class,
            {% for m in measures %}{{ m }} as stream_{{ m }}, {% endfor %}stream_rows
        from from_stream
        union all
        select {{ keys | join(', ') }}, recon_class,
            {% for m in measures %}{{ m }} as stream_{{ m }}, {% endfor %}stream_rows
        from from_batch
    ) as classified
    cross join stream_state

)

select * from final
{%- endmacro %}
