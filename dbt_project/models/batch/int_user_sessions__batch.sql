{%- set job = 'user_sessions' -%}
{{ config(materialized='recon_partitions', recon_job=job) }}
{%- set gap_seconds = job_param(job, 'gap_seconds') | int -%}
{#-
  Two ways to the same rows (a session's day, recon_date, is the day it ends: last click + gap).

  In full (the first run, a backfill, dbt's unit tests): every distinct click, sessionized.

  Composed (an incremental run, macros/compose.sql): a new click can only extend, fill or merge
  sessions that end at or after it, so the days before the first recomputed one stay as they
  are, and the days from it on are composed from the sessions this table holds for them (each a
  block: first click, last click, counts and sums) and the clicks the stream read since. A
  session that began on the first day of history is not read again, only its block.
-#}
{%- set at = compose_position(job, 'clicks') -%}

with position as (

    -- a composed row's position: the bronze version of clicks the stream had read up to
    select read_through as composed_through from ({{ stream_position(job, 'clicks') }})

),

{% if at is none -%}
events as (

    {{ classify_lateness(job, ref('stg_clicks')) }}

),

distinct_events as (

    {{ distinct_events('events', ['user_id', 'event_time', 'amount']) }}

),

on_time_events as (

    select * from distinct_events
    where counted_by_stream

),

all_sessions as (

    {{ sessionize('distinct_events', gap_seconds) }}

),

on_time_sessions as (

    {{ sessionize('on_time_events', gap_seconds) }}

),

sessions as (

    select
        *,
        'all' as basis
    from all_sessions
    union all
    select
        *,
        'on_time' as basis
    from on_time_sessions

),
{%- else -%}
{{ fresh_events(job, 'clicks', ['user_id', 'event_time', 'amount'], at) }}

blocks as (

    -- the kept sessions of the recomputed days, and each new click, as blocks
    select
        basis,
        user_id,
        window_start as first_at,
        window_end - make_interval(0, 0, 0, 0, 0, 0, {{ gap_seconds }}) as last_at,
        clicks,
        cast(spend as decimal(38, 9)) as spend,
        late_events
    from {{ this }}
    where recon_date >= date'{{ at['first'] }}'
    union all
    select
        basis,
        user_id,
        event_time as first_at,
        event_time as last_at,
        1 as clicks,
        cast(amount as decimal(38, 9)) as spend,
        if(basis = 'all' and not counted_by_stream, 1, 0) as late_events
    from fresh
        {{ each_basis() }}

),

numbered as (

    {{ number_runs('blocks', gap_seconds) }}

),

sessions as (

    select
        user_id,
        min(first_at) as window_start,
        max(last_at) + make_interval(0, 0, 0, 0, 0, 0, {{ gap_seconds }}) as window_end,
        sum(clicks) as clicks,
        (unix_micros(max(last_at)) - unix_micros(min(first_at))) / 1000000.0 as duration_seconds,
        cast(sum(spend) as double) as spend,
        sum(late_events) as late_events,
        basis
    from numbered
    group by basis, user_id, run_number

),
{%- endif %}

final as (

    select
        sessions.*,
        position.composed_through
    from sessions cross join position

)

{{ batch_rows_in_scope(job) }}
