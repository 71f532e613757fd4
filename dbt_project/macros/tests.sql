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

{#
  The rows of a bronze staging view (stg_<stream>) a generic test reads: those past the bronze
  version the last recorded reconciliation reached for every job that reads the stream, or
  every row. The rows before it passed these tests in that run (its models waited for them,
  and it recorded its positions only after all of them), and bronze rows never change; so the
  tests' cost follows the new rows, not the length of history. A full reconciliation
  (tidemark-dbt --full), a stream without a recorded position, or a dbt run without the
  positions (plain dbt) tests every row. Replaces dbt's get_where_subquery for Spark (the
  `where` config of a test still applies).
#}
{% macro spark__get_where_subquery(relation) -%}
    {%- set conditions = [] -%}
    {%- set where = config.get('where', '') -%}
    {%- if where -%}
        {%- do conditions.append('(' ~ where ~ ')') -%}
    {%- endif -%}
    {%- set since = bronze_tested_through(relation) -%}
    {%- if since is not none -%}
        {#- the rows past it lie in files no older than their first ingestion batch -#}
        {%- do conditions.append('bronze_version > ' ~ since['after']
                                 ~ ' and ingest_batch_id >= ' ~ since['ingest_batch_id']) -%}
    {%- endif -%}
    {%- if conditions -%}
        {%- do return('(select * from ' ~ relation ~ ' where ' ~ conditions | join(' and ')
                      ~ ') dbt_subquery') -%}
    {%- endif -%}
    {%- do return(relation) -%}
{%- endmacro %}

{# {after, ingest_batch_id} for a bronze staging view whose every job has a recorded position
   (recon_scope.py's replay_floor), or none. #}
{% macro bronze_tested_through(relation) -%}
    {%- set name = relation.identifier if relation.identifier is defined else '' -%}
    {%- if not name or not name.startswith('stg_') or run_var('recon_full', false) -%}
        {{ return(none) }}
    {%- endif -%}
    {%- set floors = [] -%}
    {%- for p in run_var('recon_positions', []) if p['source'] == name[4:] -%}
        {%- do floors.append(p.get('replay_floor') or {'after': -1}) -%}
    {%- endfor -%}
    {%- if not floors or floors | map(attribute='after') | min < 0 -%}
        {{ return(none) }}
    {%- endif -%}
    {{ return({'after': floors | map(attribute='after') | min,
               'ingest_batch_id': floors | map(attribute='ingest_batch_id') | min}) }}
{%- endmacro %}

{# Fails with one row per listed column that holds a null: the column and how many rows lack
   it. One statement for every column of a model, where a not_null test per column would each
   read the model again (a bronze staging view's rows, through Delta row tracking). #}
{% test columns_not_null(model, columns) %}
    select column_name, null_rows
    from (
        select stack({{ columns | length }},
            {%- for c in columns %}
            '{{ c }}', {{ c }}_nulls{{ "," if not loop.last }}
            {%- endfor %}
        ) as (column_name, null_rows)
        from (
            select
                {%- for c in columns %}
                count_if({{ c }} is null) as {{ c }}_nulls{{ "," if not loop.last }}
                {%- endfor %}
            from {{ model }}
        ) counted
    ) by_column
    where null_rows > 0
{% endtest %}

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
    {%- set ahead = run_var('watermark_ahead_seconds', 86400) | int -%}
    select
        '{{ job }}' as job,
        max(stream_watermark) as stream_watermark,
        current_timestamp() as reconciled_at,
        {{ ahead }} as watermark_ahead_seconds
    from {{ model }}
    where {{ tested_days(model) }}
    having max(stream_watermark) > current_timestamp() + make_dt_interval(0, 0, 0, {{ ahead }})
{% endtest %}
