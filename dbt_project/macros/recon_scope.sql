{#
  Incremental reconciliation (orchestration/recon/recon_scope.py decides, before dbt starts).

  A job with a recon_partition has its batch and recon tables partitioned by recon_date (the
  UTC day of the row's window, session or order). var recon_from[job] is the first day this
  run recomputes: the days from there on are replaced, the days before it kept as the last
  run left them. Null (or a job without recon_partition): every day, the table rebuilt (a full
  reconciliation, or a backfill: `tidemark-dbt --full`).
#}

{# The first day this run recomputes for the job, or none (every day; also in dbt's unit
   tests, whose fixture rows are the whole input). #}
{% macro recon_from(job) -%}
{%- if model is defined and model is mapping and model.get('resource_type') == 'unit_test' -%}
{{ return(none) }}
{%- endif -%}
{%- set partitioned = var('jobs')[job].get('recon_partition') -%}
{{ return(run_var('recon_from', {}).get(job) if partitioned else none) }}
{%- endmacro %}

{# Whether nothing new reached the job since its last reconciliation (recon_scope.py's
   NOTHING_NEW): the run leaves its models out, and its lateness counts stand as they were. #}
{% macro nothing_new(job) -%}
{{ return(run_var('recon_from', {}).get(job) == '9999-12-31') }}
{%- endmacro %}

{# The same for a job whose batch model composes its rows (macros/compose.sql), with a day or
   without (a profile): there it bounds the new events' time from below. #}
{% macro compose_from(job) -%}
{%- if model is defined and model is mapping and model.get('resource_type') == 'unit_test' -%}
{{ return(none) }}
{%- endif -%}
{%- set params = var('jobs')[job] -%}
{{ return(run_var('recon_from', {}).get(job)
          if params.get('recon_partition') or params.get('recon_composed') else none) }}
{%- endmacro %}

{# The job's day of a row, as SQL over its columns (gold and batch rows alike). #}
{% macro recon_date(job) -%}
{{ var('jobs')[job]['recon_partition'] }}
{%- endmacro %}

{# A batch model's rows with their day, the recomputed days only (its last select). #}
{% macro batch_rows_in_scope(job, relation='final') -%}
select *, {{ recon_date(job) }} as recon_date
from {{ relation }}
where {{ in_recon_scope(job, recon_date(job)) }}
{%- endmacro %}

{# `date_sql >= the first recomputed day`, or true when every day is recomputed. #}
{% macro in_recon_scope(job, date_sql='recon_date') -%}
{%- set first = recon_from(job) -%}
{%- if first is none -%}true{%- else -%}{{ date_sql }} >= date'{{ first }}'{%- endif -%}
{%- endmacro %}

{# The events a job's batch model reads: from the first recomputed day less its read-back
   (a sliding window's length, a session gap, a join bound), or every event. #}
{% macro events_in_recon_scope(job, event_time) -%}
{%- set first = recon_from(job) -%}
{%- if first is none -%}true{%- else -%}
{{ event_time }} >= timestamp'{{ first }} 00:00:00' - make_interval(0, 0, 0, 0, 0, 0, {{ var('jobs')[job]['recon_read_back_seconds'] }})
{%- endif -%}
{%- endmacro %}

{#
  A table partitioned by recon_date whose days from var recon_from[job] on are replaced by the
  model's rows in one Delta commit (INSERT INTO ... REPLACE WHERE): readers see the old days or
  the new ones, never a mix, and a run killed half way leaves the last run's table. Without a
  first day (a full run), or when the table is not there yet, it is created or replaced whole.
  A composed job without a day (recon_composed, no recon_partition: a profile per user) has no
  partitions: its model's rows, which keep what they do not change, replace the whole table in
  one commit. Config: recon_job (the job whose var recon_from applies).
#}
{% materialization recon_partitions, adapter='spark' -%}
  {%- set job = config.require('recon_job') -%}
  {%- set by_day = var('jobs')[job].get('recon_partition') -%}
  {%- set first = recon_from(job) if by_day else compose_from(job) -%}
  {%- set target = this.incorporate(type='table') -%}
  {%- set existing = load_relation(this) -%}
  {{ run_hooks(pre_hooks) }}
  {%- if first is not none and existing is none -%}
    {%- do exceptions.raise_compiler_error("recon table " ~ this ~ " of job " ~ job ~ " is missing but this run recomputes only what changed from " ~ first ~ ": run a full reconciliation (tidemark-dbt --full build, or the reconciliation_job with tag tidemark/recon=full)") -%}
  {%- endif -%}
  {%- if first == '9999-12-31' -%}
    {#- nothing new reached the job (orchestration/recon/recon_scope.py NOTHING_NEW): no day changes -#}
    {%- call statement('main') -%}
      select 1
    {%- endcall -%}
  {%- elif first is none -%}
    {%- call statement('main') -%}
      create or replace table {{ target }}
      using delta
      {% if by_day %}partitioned by (recon_date){% endif %}
      as {{ sql }}
    {%- endcall -%}
  {%- else -%}
    {%- set columns = adapter.get_columns_in_relation(existing) | map(attribute='name') | list -%}
    {%- call statement('main') -%}
      {% if by_day -%}
      insert into {{ target }} replace where recon_date >= date'{{ first }}'
      {%- else -%}
      insert overwrite table {{ target }}
      {%- endif %}
      select {{ columns | join(', ') }} from (
      {{ sql }}
      )
    {%- endcall -%}
  {%- endif -%}
  {{ run_hooks(post_hooks) }}
  {{ return({'relations': [target]}) }}
{%- endmaterialization %}
