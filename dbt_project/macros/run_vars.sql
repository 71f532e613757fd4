{#
  The vars that are this invocation's own: the streams' pinned position (progress_version,
  gold_versions), what the run recomputes (recon_from, recon_positions, recon_full), and what
  tidemark-dbt read from the lake and the settings (text_measures, watermark_ahead_seconds).
  tidemark-dbt passes them in the environment (TIDEMARK_DBT_RUN_VARS, orchestration/recon/dbt_cli.py),
  not in --vars: dbt parses the whole project again whenever --vars change, and these change
  every run. They are read while the run runs (the parse sees the default, and builds the same
  graph); plain dbt's --vars still set them.
#}
{% macro run_var(name, default=none) -%}
{%- if execute -%}
{%- set values = fromjson(env_var('TIDEMARK_DBT_RUN_VARS', '{}')) -%}
{%- if name in values -%}
{{ return(values[name]) }}
{%- endif -%}
{%- endif -%}
{{ return(var(name, default)) }}
{%- endmacro %}

{#
  Said at the start of a run that is not tidemark-dbt's (plain dbt sets no
  TIDEMARK_DBT_RUN_VARS): what it does not do, so that nobody takes it for a scheduled
  reconciliation's equal. An on-run-start hook; it runs no SQL.
#}
{% macro say_outside_tidemark_dbt() -%}
{%- if execute and flags.WHICH in ('build', 'run', 'test', 'seed', 'snapshot')
      and env_var('TIDEMARK_DBT_RUN_VARS', '') == '' -%}
{%- do log(
    "tidemark: this is plain dbt, not tidemark-dbt: it takes no reconciliation lock and pins"
    ~ " no stream position, so a running stream or a scheduled reconciliation can change what"
    ~ " it reads and writes. Beside them run tidemark-dbt instead (make dbt ARGS=\"...\"; see"
    ~ " docs/reconciliation.md, 'dbt by hand')", info=true) -%}
{%- endif -%}
{%- endmacro %}
