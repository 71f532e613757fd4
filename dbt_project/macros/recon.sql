{# A job's gold rows per key; a key present twice is a defect, summed here and flagged by
   stream_rows. #}
{% macro streamed_by_key(job) -%}
{%- set keys = var('jobs')[job]['keys'] -%}
{%- set measures = var('jobs')[job]['measures'] -%}
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
