{%- set job = 'zone_revenue_hourly' -%}
{{ config(materialized='recon_partitions', recon_job=job) }}
{%- set window_seconds = job_param(job, 'window_seconds') | int -%}

with events as (

    {{ classify_lateness(job, ref('stg_rides')) }}

),

distinct_events as (

    {{ distinct_events('events', ['pickup_zone', 'pickup_time', 'fare', 'total_amount']) }}

),

windows as (

    select
        pickup_zone,
        timestamp_seconds(
            floor(unix_micros(pickup_time) / {{ window_seconds * 1000000 }}) * {{ window_seconds }}
        ) as window_start,
        count(*) as trips,
        -- summed exactly (as decimals): an incremental run reads the rides in another order
        -- than a backfill, and a double sum would differ from it in its last digits
        cast(sum(cast(total_amount as decimal(38, 9))) as double) as revenue,
        cast(avg(cast(fare as decimal(38, 9))) as double) as avg_fare,
        count_if(counted_by_stream) as trips_on_time,
        cast(sum(if(counted_by_stream, cast(total_amount as decimal(38, 9)), null)) as double)
            as revenue_on_time,
        cast(avg(if(counted_by_stream, cast(fare as decimal(38, 9)), null)) as double)
            as avg_fare_on_time,
        count_if(counted_by_stream) as events_on_time
    from distinct_events
    group by pickup_zone, window_start

),

final as (

    select
        pickup_zone,
        window_start,
        window_start + make_interval(0, 0, 0, 0, 0, 0, {{ window_seconds }}) as window_end,
        trips,
        revenue,
        avg_fare,
        trips_on_time,
        revenue_on_time,
        avg_fare_on_time,
        events_on_time
    from windows

)

{{ batch_rows_in_scope(job) }}
