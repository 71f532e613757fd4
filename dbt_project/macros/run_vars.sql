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
