{# A job's gold rows per key; a key present twice is a defect, summed here (any one value of
   a non-numeric measure) and flagged by stream_rows. A job reconciled by day: its rows of
   the days this run recomputes, with their day (recon_date). #}
{% macro streamed_by_key(job) -%}
{%- set keys = var('jobs')[job]['keys'] -%}
{%- set measures = var('jobs')[job]['measures'] -%}
{%- set partitioned = var('jobs')[job].get('recon_partition') -%}
    select
        {{ keys | join(', ') }},
        {% for m in measures %}{% if measure_is_numeric(job, m) %}sum({{ m }}){% else %}any_value({{ m }}){% endif %} as {{ m }},
        {% endfor %}{% if partitioned %}min({{ recon_date(job) }}) as recon_date,
        {% endif %}count(*) as stream_rows
    from {{ gold_as_of(job) }}
    {% if partitioned -%}
    where {{ in_recon_scope(job, recon_date(job)) }}
    {% endif -%}
    group by {{ keys | join(', ') }}
{%- endmacro %}

{#
  A job's gold table as of the last batch its progress rows record (var gold_versions, which
  tidemark-dbt reads from ops/stream_progress as pinned by var progress_version). A job in
  var shadow_gold is read from its rebuild's shadow table instead: the new version,
  reconciled before it is swapped in (tidemark-dbt --shadow JOB). A stream
  that keeps running while dbt reads has written batches past that: they are left out here, as
  their source ranges and watermark are left out of the batch side.
#}
{% macro gold_as_of(job) -%}
{%- set version = run_var('gold_versions', {}).get(job) -%}
{%- set shadow = run_var('shadow_gold', {}).get(job) -%}
{%- if shadow %}delta.`{{ shadow }}`{% else %}{{ source('lake', 'gold_' ~ job) }}{% endif %}
{%- if version is not none %} version as of {{ version }}{% endif %}
{%- endmacro %}

{# The job's watermark when the recon runs: windows ending after it are not final yet. #}
{% macro stream_watermark(job) -%}
    select max(watermark) as stream_watermark
    from {{ ref('stg_stream_progress') }}
    where job = '{{ job }}'
{%- endmacro %}

{#
  Whether a job's measure is a number (compared within the job's tolerance, with a diff column)
  or anything else (compared for exact equality). var text_measures lists, per job, the measures
  its gold table holds as non-numbers (read from the table's schema by tidemark-dbt); without
  it, a measure counts as a number.
#}
{% macro measure_is_numeric(job, m) -%}
{{ return(m not in run_var('text_measures', {}).get(job, [])) }}
{%- endmacro %}
