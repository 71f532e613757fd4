{%- set job = 'user_sessions' -%}
{{ config(materialized='recon_partitions', recon_job=job) }}
{%- set gap_seconds = job_param(job, 'gap_seconds') | int -%}

with events as (

    {{ classify_lateness(job, ref('stg_clicks')) }}

),

distinct_events as (

    {{ distinct_events('events', ['user_id', 'event_time', 'amount']) }}

),

on_time_events as (

    select * from distinct_events where counted_by_stream

),

all_sessions as (

    {{ sessionize('distinct_events', gap_seconds) }}

),

on_time_sessions as (

    {{ sessionize('on_time_events', gap_seconds) }}

),

final as (

    select *, 'all' as basis from all_sessions
    union all
    select *, 'on_time' as basis from on_time_sessions

)

{{ batch_rows_in_scope(job) }}
