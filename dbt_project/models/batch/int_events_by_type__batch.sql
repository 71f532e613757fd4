{%- set job = 'events_by_type' -%}
{{ config(materialized='recon_partitions', recon_job=job) }}

-- Every distinct click in its (event_type, event_date) partition: over all clicks (basis all)
-- and over the clicks the stream counted (basis on_time).

with events as (

    {{ classify_lateness(job, ref('stg_clicks')) }}

),

distinct_events as (

    {{ distinct_events('events', ['action', 'event_time', 'amount']) }}

),

routed as (

    select
        action as event_type,
        to_date(event_time) as event_date,
        event_id,
        event_time,
        amount,
        counted_by_stream
    from distinct_events

),

final as (

    select
        basis,
        event_type,
        event_date,
        event_id,
        event_time,
        amount
    from routed
        {{ each_basis() }}

)

{{ batch_rows_in_scope(job) }}
