{# A job's gold rows per key; a key present twice is a defect, summed here and flagged by
   stream_rows. #}
{% macro streamed_by_key(job, keys, measures) -%}
    select
        {{ keys | join(', ') }},
        {% for m in measures %}sum({{ m }}) as {{ m }},
        {% endfor %}count(*) as stream_rows
    from {{ gold_as_of(job) }}
    group by {{ keys | join(', ') }}
{%- endmacro %}

{#
  A job's gold table as of the last batch its progress rows record (var gold_versions, which
  tidemark-dbt reads from ops/stream_progress as pinned by var progress_version). A stream
  that keeps running while dbt reads has written batches past that: they are left out here, as
  their source ranges and watermark are left out of the batch side.
#}
{% macro gold_as_of(job) -%}
{%- set version = var('gold_versions', {}).get(job) -%}
{{ source('lake', 'gold_' ~ job) }}{% if version is not none %} version as of {{ version }}{% endif %}
{%- endmacro %}

{# The job's watermark when the recon runs: windows ending after it are not final yet. #}
{% macro stream_watermark(job) -%}
    select max(watermark) as stream_watermark
    from {{ ref('stg_stream_progress') }}
    where job = '{{ job }}'
{%- endmacro %}

{#
  Streamed rows of a windowed job against its batch recomputation, every row in one class.

  Reads the job's keys, measures and tolerance from the registry (--vars). The batch model
  int_<job>__batch has, per key, each measure over all events, `<measure>_on_time` over the
  events the stream did not drop as late, and `events_on_time`.
#}
{% macro recon_windowed(job) -%}
{%- set spec = var('jobs')[job] -%}
{%- set keys = spec['keys'] -%}
{%- set measures = spec['measures'] -%}
{%- set tolerance = spec['tolerance'] -%}

with streamed as (

    {{ streamed_by_key(job, keys, measures) }}

),

batched as (

    select *, true as in_batch from {{ ref('int_' ~ job ~ '__batch') }}

),

stream_state as (

    {{ stream_watermark(job) }}

),

joined as (

    select
        {% for k in keys %}coalesce(streamed.{{ k }}, batched.{{ k }}) as {{ k }},
        {% endfor %}{% for m in measures %}streamed.{{ m }} as stream_{{ m }},
        batched.{{ m }} as batch_{{ m }},
        batched.{{ m }}_on_time as batch_{{ m }}_on_time,
        {% endfor %}streamed.stream_rows,
        coalesce(batched.in_batch, false) as in_batch,
        coalesce(batched.events_on_time, 0) as batch_events_on_time
    from streamed
    full outer join batched
        on {% for k in keys %}streamed.{{ k }} = batched.{{ k }}{% if not loop.last %} and {% endif %}{% endfor %}

),

classified as (

    select
        joined.*,
        stream_state.stream_watermark,
        case
            -- append mode emits a window once the watermark passes its end
            when joined.stream_rows is null
                and (stream_state.stream_watermark is null
                     or joined.window_end > stream_state.stream_watermark)
                then 'window_open'
            when joined.stream_rows is null and joined.batch_events_on_time = 0 then 'late_dropped'
            when joined.stream_rows is null then 'missing_in_stream'
            when not joined.in_batch then 'missing_in_batch'
            when joined.stream_rows = 1
                {% for m in measures %}and abs(joined.stream_{{ m }} - joined.batch_{{ m }}) <= {{ tolerance }}
                {% endfor %}then 'match'
            when joined.stream_rows = 1
                {% for m in measures %}and abs(joined.stream_{{ m }} - joined.batch_{{ m }}_on_time) <= {{ tolerance }}
                {% endfor %}then 'late_dropped'
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
        current_timestamp() as reconciled_at
    from classified

)

select * from final
{%- endmacro %}
