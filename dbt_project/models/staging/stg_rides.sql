-- Written from streaming_jobs/schemas.py by `make dbt-models`; a test keeps it equal.
-- Bronze rides as a view, with each row's bronze commit version (row tracking), which
-- tells which stream batch read it, and its stable row id (a folded batch's late rows are
-- recorded by it).

with source as (

    select
        *,
        _metadata.row_commit_version as bronze_version,
        _metadata.row_id as bronze_row_id
    from {{ source('lake', 'bronze_rides') }}

),

final as (

    select
        event_id,
        ride_id,
        pickup_zone,
        dropoff_zone,
        passengers,
        fare,
        total_amount,
        pickup_time,
        _source_file as source_file,
        _ingested_at as ingested_at,
        _ingest_batch_id as ingest_batch_id,
        bronze_version,
        bronze_row_id
    from source

)

select * from final
