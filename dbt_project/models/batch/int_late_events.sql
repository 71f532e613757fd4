-- Per job: the rows the batch replay finds behind the stream's watermark (kept as running
-- counts per source by int_late_events_by_source), and the stream's own count of rows dropped
-- by watermark. The two must agree (test late_counts_agree), but for the late rows of batches
-- whose own report was lost (late_events_report_lost): a batch that re-ran after a stop or a
-- crash with its write already committed reports nothing, and what its cut-short run dropped
-- is in no report.

with

-- per job, over its sources (a job that joins streams drops late events on each side)
replayed as (

    select
        job,
        sum(late_events_replayed) as late_events_replayed,
        sum(late_events_report_lost) as late_events_report_lost,
        sum(events_skipped + events_not_yet_read) as events_not_yet_read
    from {{ ref('int_late_events_by_source') }}
    group by job

),

reported as (

    select
        job,
        sum(rows_dropped_by_watermark) as late_events_reported,
        max(watermark) as stream_watermark
    from {{ ref('stg_stream_progress') }}
    group by job

),

final as (

    select
        replayed.job,
        replayed.late_events_replayed,
        coalesce(reported.late_events_reported, 0) as late_events_reported,
        replayed.late_events_report_lost,
        replayed.events_not_yet_read,
        reported.stream_watermark
    from replayed
    left join reported on replayed.job = reported.job

)

select * from final
