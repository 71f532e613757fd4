{{ config(materialized='incremental', incremental_strategy='append') }}

-- History: every reconciliation run appends one row per job.

with recon as (

    {% for job in var('jobs') %}
    select job, recon_class, stream_watermark from {{ ref('recon_' ~ job) }}
    {% if not loop.last %}union all{% endif %}
    {% endfor %}

),

late as (

    select * from {{ ref('int_late_events') }}

),

counts as (

    select
        job,
        count(*) as rows_compared,
        {% for class in recon_classes() %}count_if(recon_class = '{{ class }}') as {{ class }}_rows,
        {% endfor %}count_if(recon_class in ({{ quoted(var('recon_classes')['unexplained']) }}))
            as unexplained_rows,
        max(stream_watermark) as stream_watermark
    from recon
    group by job

),

final as (

    select
        counts.job,
        '{{ invocation_id }}' as invocation_id,
        current_timestamp() as reconciled_at,
        counts.rows_compared,
        {% for class in recon_classes() %}counts.{{ class }}_rows,
        {% endfor %}counts.unexplained_rows,
        late.late_events_replayed,
        late.late_events_reported,
        counts.stream_watermark
    from counts
    left join late on counts.job = late.job

)

select * from final
