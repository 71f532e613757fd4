{%- set job = 'zone_revenue_hourly' -%}
{{ config(materialized='recon_partitions', recon_job=job) }}
{%- set spec = var('jobs')[job] -%}
{%- set keys = spec['keys'] -%}
{%- set measures = spec['measures'] -%}
{%- set tolerance = spec['tolerance'] -%}
{%- set on_keys = [] -%}
{%- for k in keys -%}
{%- do on_keys.append('streamed.' ~ k ~ ' = batched.' ~ k) -%}
{%- endfor -%}

-- Revenue per pickup zone per tumbling hour as streamed, against the batch recomputation:
-- every window in exactly one recon class. The windows do not depend on which events arrived
-- (a late ride only changes its window's values), so the batch model has each measure over all
-- rides and over the on-time ones (<measure>_on_time), and one join suffices.

with streamed as (

    {{ streamed_by_key(job) }}

),

batched as (

    select
        *,
        true as in_batch
    from {{ ref('int_zone_revenue_hourly__batch') }}
    where {{ in_recon_scope(job) }}  -- the days this run recomputes

),

stream_state as (

    {{ stream_watermark(job) }}

),

joined as (

    select
        {% for k in keys -%}
        coalesce(streamed.{{ k }}, batched.{{ k }}) as {{ k }},
        {% endfor -%}
        {% for m in measures -%}
        streamed.{{ m }} as stream_{{ m }},
        batched.{{ m }} as batch_{{ m }},
        batched.{{ m }}_on_time as batch_{{ m }}_on_time,
        {% endfor -%}
        streamed.stream_rows,
        coalesce(streamed.recon_date, batched.recon_date) as recon_date,
        coalesce(batched.in_batch, false) as in_batch,
        coalesce(batched.events_on_time, 0) as batch_events_on_time
    from streamed
    full outer join batched
        on {{ on_keys | join('\n            and ') }}

),

classified as (

    select
        joined.*,
        stream_state.stream_watermark,
        case
            -- append mode emits a window once the watermark passes its end
            when
                joined.stream_rows is null
                and (
                    stream_state.stream_watermark is null
                    or joined.window_end > stream_state.stream_watermark
                )
                then 'window_open'
            when joined.stream_rows is null and joined.batch_events_on_time = 0
                then 'late_dropped'
            when joined.stream_rows is null then 'missing_in_stream'
            when not joined.in_batch then 'missing_in_batch'
            when
                joined.stream_rows = 1
                {% for m in measures -%}
                and abs(joined.stream_{{ m }} - joined.batch_{{ m }}) <= {{ tolerance }}
                {% endfor -%}
                then 'match'
            when
                joined.stream_rows = 1
                {% for m in measures -%}
                and abs(joined.stream_{{ m }} - joined.batch_{{ m }}_on_time) <= {{ tolerance }}
                {% endfor -%}
                then 'late_dropped'
            else 'value_mismatch'
        end as recon_class
    from joined
    cross join stream_state

),

final as (

    select
        '{{ job }}' as job,
        {% for k in keys %}{{ k }},
        {% endfor %}recon_class,
        {% for m in measures %}stream_{{ m }},
        batch_{{ m }},
        batch_{{ m }}_on_time,
        stream_{{ m }} - batch_{{ m }} as {{ m }}_diff,
        {% endfor %}stream_rows,
        stream_watermark,
        current_timestamp() as reconciled_at,
        recon_date
    from classified

)

select * from final
