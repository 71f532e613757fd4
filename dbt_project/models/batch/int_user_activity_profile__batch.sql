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

profiles as (

    {{ latest_profiles('distinct_events', ttl_millis) }}

),
{%- else -%}
{{ fresh_events(job, 'clicks', ['user_id', 'event_time', 'amount'], at) }}

kept_and_new as (

    -- the kept profiles and, as one-click blocks, the new clicks in each basis that counts them
    select
        basis,
        user_id,
        first_activity as first_at,
        last_activity as last_at,
        visits,
        cast(total_spend as decimal(38, 9)) as spend,
        total_spend,
        false as is_new
    from {{ this }}
    union all
    select
        basis,
        user_id,
        event_time as first_at,
        event_time as last_at,
        1 as visits,
        cast(amount as decimal(38, 9)) as spend,
        cast(null as double) as total_spend,
        true as is_new
    from fresh
        {{ each_basis() }}

),

with_kept_first as (

    -- each row's kept first click in its basis (null: the user has no profile there yet)
    select
        *,
        if(
            basis = 'all', min(if(is_new or basis <> 'all', null, first_at)) over by_user,
            min(if(is_new or basis <> 'on_time', null, first_at)) over by_user)
            as kept_first
    from kept_and_new
    window by_user as (partition by user_id)

),

reaching as (

    -- a new click reaches the kept profile unless it is more than a TTL before its first
    select
        *,
        is_new and (
            kept_first is null
            or unix_millis(kept_first) - unix_millis(first_at) <= {{ ttl_millis }})
            as reaches
    from with_kept_first

),

marked as (

    -- a user is redone when a click reaches just before a kept profile: it may join the
    -- profile to older clicks this table does not hold
    select
        *,
        max(if(reaches and first_at < kept_first, 1, 0)) over by_user = 1 as redone
    from reaching
    window by_user as (partition by user_id)

),

-- the kept profiles (touched or not) and the clicks that reach them, in runs
runs as (

    {{ number_runs('(select * from marked where not redone and (reaches or not is_new))',
                   ttl_seconds, unit='millis') }}

),

latest_runs as (

    select
        *,
        max(run_number) over (partition by basis, user_id) as latest_run
    from runs

),

composed as (

    select
        basis,
        user_id,
        sum(visits) as visits,
        -- a profile without new clicks keeps its value as it is
        if(bool_or(is_new), cast(sum(spend) as double), max(total_spend)) as total_spend,
        min(first_at) as first_activity,
        max(last_at) as last_activity
    from latest_runs
    where run_number = latest_run
    group by basis, user_id

),

redone_users as (

    select user_id from marked
    where redone

),

redone_clicks as (

    select clicks.*
    from {{ ref('stg_clicks') }} as clicks
    left semi join redone_users
        on clicks.user_id = redone_users.user_id

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

profiles as (

    select * from composed
    union all
    select * from redone

),
{%- endif %}

final as (

    select
        profiles.basis,
        profiles.user_id,
        profiles.visits,
        profiles.total_spend,
        (unix_millis(profiles.last_activity) - unix_millis(profiles.first_activity)) / 1000.0
            as active_seconds,
        profiles.first_activity,
        profiles.last_activity,
        profiles.last_activity + make_interval(0, 0, 0, 0, 0, 0, {{ ttl_seconds }}) as expires_at,
        position.composed_through
    from profiles cross join position

)

select * from final
