-- Per job: the rows the batch replay finds behind the stream's watermark, and the stream's own
-- count of rows dropped by watermark. The two must agree (test late_counts_agree).

with

{% for job, params in var('jobs').items() %}
{% for source in params['sources'] %}
replay_{{ job }}__{{ source }} as (

    select
        '{{ job }}' as job,
        count_if(is_late) as late_events_replayed,
        count_if(not seen_by_stream) as events_not_yet_read
    from ({{ classify_lateness(job, ref('stg_' ~ source), source, read_only=false) }})

),
{% endfor %}
{% endfor %}

-- a job that joins streams drops late events on each side: its count is their sum
replayed as (

    select job, sum(late_events_replayed) as late_events_replayed,
        sum(events_not_yet_read) as events_not_yet_read
    from (
        {% for job, params in var('jobs').items() %}{% for source in params['sources'] %}
        select * from replay_{{ job }}__{{ source }}
        {% if not loop.last %}union all{% endif %}
        {% endfor %}{% if not loop.last %}union all{% endif %}{% endfor %}
    )
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
        replayed.events_not_yet_read,
        reported.stream_watermark
    from replayed
    left join reported on replayed.job = reported.job

)

select * from final
