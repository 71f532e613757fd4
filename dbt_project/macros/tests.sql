{#
  The days of a recon model a test reads: those this run recomputed (a job reconciled by day,
  var recon_from), or every row. The days before were tested when they were last recomputed
  and have not changed since; a run whose tests fail records no position (recon_positions is
  built after them), so the next run recomputes, and tests, those days again.
#}
{% macro tested_days(model) -%}
{%- set name = model.identifier if model.identifier is defined else '' -%}
{%- set job = name[6:] if name and name.startswith('recon_') else none -%}
{%- if job and job in var('jobs') and recon_from(job) is not none -%}
recon_date >= date'{{ recon_from(job) }}'
{%- else -%}
true
{%- endif -%}
{%- endmacro %}

{# Fails with the rows a recon model could not explain: the stream and the batch disagree. #}
{% test no_unexplained_rows(model) %}
    select *
    from {{ model }}
    where recon_class in ({{ quoted(var('recon_classes')['unexplained']) }})
        and {{ tested_days(model) }}
{% endtest %}

{# Fails with the rows whose recon_class is missing or not one of the known classes. #}
{% test recon_class_is_known(model) %}
    select *
    from {{ model }}
    where (recon_class is null or recon_class not in ({{ quoted(recon_classes()) }}))
        and {{ tested_days(model) }}
{% endtest %}

{# Fails when the batch replay and the stream disagree on how many events were dropped late
   (the late rows of batches whose own report was lost are in no report: left out). #}
{% test late_counts_agree(model) %}
    select *
    from {{ model }}
    where late_events_replayed - late_events_report_lost <> late_events_reported
{% endtest %}

{# Fails with every key that appears more than once. #}
{% test unique_combination(model, columns) %}
    select {{ columns | join(', ') }}, count(*) as copies
    from {{ model }}
    where {{ tested_days(model) }}
    group by {{ columns | join(', ') }}
    having count(*) > 1
{% endtest %}

{# Warns (severity warn) when more of the rows compared are explained than the job's
   recon_warn_share: many windows still open or many events late. Not a defect; a signal. #}
{% test explained_share_at_most(model, job) %}
    {#- explained by something other than agreement: not final yet, or late events -#}
    {%- set explained = var('recon_classes')['explained'] | reject('equalto', 'match') | list -%}
    {%- set share = var('jobs')[job]['warn_share'] -%}
    select
        count(*) as rows_compared,
        count_if(recon_class in ({{ quoted(explained) }})) as explained_rows,
        {{ share }} as warn_share
    from {{ model }}
    where {{ tested_days(model) }}
    having count_if(recon_class in ({{ quoted(explained) }})) > {{ share }} * count(*)
{% endtest %}

{# Fails when the job's watermark is further past the reconciliation's clock than var
   watermark_ahead_seconds (TIDEMARK_WATERMARK_AHEAD_SECONDS, the health check's own limit): an
   event dated far in the future moved it, so every row it made late_dropped is lost, not
   explained. Reads its recon model only (its stream_watermark), so a partial build selects it
   only with that model. #}
{% test watermark_plausible(model, job) %}
    {%- set ahead = var('watermark_ahead_seconds', 86400) | int -%}
    select
        '{{ job }}' as job,
        max(stream_watermark) as stream_watermark,
        current_timestamp() as reconciled_at,
        {{ ahead }} as watermark_ahead_seconds
    from {{ model }}
    where {{ tested_days(model) }}
    having max(stream_watermark) > current_timestamp() + make_dt_interval(0, 0, 0, {{ ahead }})
{% endtest %}
