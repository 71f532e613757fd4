{%- set job = 'user_activity_profile' -%}
{{ config(materialized='recon_partitions', recon_job=job) }}
{%- set ttl_seconds = job_param(job, 'ttl_seconds') | int -%}
{%- set ttl_millis = ttl_seconds * 1000 -%}

-- Each user's latest profile: the last run of their distinct clicks, in event-time order, with
-- no pause longer than the TTL (a longer pause forgets the user). Once over all clicks (basis
-- all, the truth), once over the clicks the stream counted (basis on_time).
{#-
  In full (the first run, a backfill, dbt's unit tests): every distinct click.

  Composed (an incremental run, macros/compose.sql): a user's latest profile is one block (first
  and last click, visits, spend). A new click more than a TTL before the block's first click
  cannot change it (a pause longer than the TTL still separates them); one inside the block or
  after it merges with it or opens a newer run, as the rule says, so the block and the new clicks
  give the profile. Only a new click less than a TTL before the block's first one can join the
  block to older clicks the table does not hold: that user's profiles are recomputed from all
  of the user's clicks. Users without new clicks keep their rows.
-#}
{%- set at = compose_position(job, 'clicks') %}

with position as (

    {{ stream_position(job, 'clicks') }}

),

{% if at is none -%}
events as (

    {{ classify_lateness(job, ref('stg_clicks')) }}

),

distinct_events as (

    {{ distinct_events('events', ['user_id', 'event_time', 'amount']) }}

),

profiles as (

    {{ latest_profiles('distinct_events', ttl_millis) }}

),
{%- else -%}
{{ fresh_events(job, 'clicks', ['user_id', 'event_time', 'amount'], at) }}

kept as (

    select * from {{ this }}

),

fresh_by_basis as (

    select 'all' as basis, * from fresh
    union all
    select 'on_time' as basis, * from fresh where counted_by_stream

),

reaching as (

    -- the new clicks that can change a kept profile (all of them for a user without one)
    select fresh_by_basis.*, kept.first_activity as kept_first
    from fresh_by_basis
    left join kept
        on kept.basis = fresh_by_basis.basis and kept.user_id = fresh_by_basis.user_id
    where kept.user_id is null
        or unix_millis(kept.first_activity) - unix_millis(fresh_by_basis.event_time) <= {{ ttl_millis }}

),

redone_users as (

    -- a new click just before the kept block may join it to older clicks: all clicks again
    select distinct user_id from reaching where event_time < kept_first

),

redone_clicks as (

    select * from {{ ref('stg_clicks') }} left semi join redone_users using (user_id)

),

redone_events as (

    {{ classify_lateness(job, 'redone_clicks', scoped=false) }}

),

redone_distinct as (

    {{ distinct_events('redone_events', ['user_id', 'event_time', 'amount']) }}

),

redone as (

    {{ latest_profiles('redone_distinct', ttl_millis) }}

),

touched as (

    select distinct basis, user_id from reaching left anti join redone_users using (user_id)

),

blocks as (

    select kept.basis, kept.user_id, first_activity as first_at, last_activity as last_at,
           visits, cast(total_spend as decimal(38, 9)) as spend
    from kept join touched using (basis, user_id)
    union all
    select basis, user_id, event_time, event_time, 1, cast(amount as decimal(38, 9))
    from reaching left anti join redone_users using (user_id)

),

runs as (

    {{ number_runs('blocks', ttl_seconds, unit='millis') }}

),

composed as (

    select basis, user_id, sum(visits) as visits, cast(sum(spend) as double) as total_spend,
           min(first_at) as first_activity, max(last_at) as last_activity
    from (select *, max(run_number) over (partition by basis, user_id) as latest_run from runs)
    where run_number = latest_run
    group by basis, user_id

),

profiles as (

    select basis, user_id, visits, total_spend, first_activity, last_activity from kept
    left anti join touched using (basis, user_id)
    left anti join redone_users using (user_id)
    union all
    select basis, user_id, visits, total_spend, first_activity, last_activity from composed
    union all
    select basis, user_id, visits, total_spend, first_activity, last_activity from redone

),
{%- endif %}

final as (

    select
        basis,
        user_id,
        visits,
        total_spend,
        (unix_millis(last_activity) - unix_millis(first_activity)) / 1000.0 as active_seconds,
        first_activity,
        last_activity,
        last_activity + make_interval(0, 0, 0, 0, 0, 0, {{ ttl_seconds }}) as expires_at,
        position.composed_through
    from profiles cross join position

)

select * from final
