{# The path of a lake table under the data root, e.g. lake_path('bronze', 'transactions'). #}
{% macro lake_path(layer, name) -%}
{{ env_var('TIDEMARK_DATA_ROOT') }}/lake/{{ layer }}/{{ name }}
{%- endmacro %}

{# A job's parameter from the registry (passed as --vars), with a clear error when absent. #}
{% macro job_param(job, key) -%}
{%- set jobs = var('jobs') -%}
{%- if job not in jobs or key not in jobs[job] -%}
{{ exceptions.raise_compiler_error(
    "job parameter " ~ job ~ "." ~ key ~ " was not passed in --vars; run dbt through "
    ~ "`tidemark-dbt` (or `make dbt ARGS=...`), which passes the job registry") }}
{%- endif -%}
{{ jobs[job][key] }}
{%- endmacro %}

{# Spark names schemas without the target schema prefix: staging, batch, recon; behind this
   data root's own prefix (TIDEMARK_DBT_SCHEMA_PREFIX) on an endpoint several data roots share. #}
{% macro generate_schema_name(custom_schema_name, node) -%}
{%- set name = custom_schema_name if custom_schema_name else target.schema -%}
{{ env_var('TIDEMARK_DBT_SCHEMA_PREFIX', '') }}{{ name }}
{%- endmacro %}

{# A schema's tables live under the data root's warehouse, as <schema without the prefix>.db,
   whichever server runs the SQL: the lake keeps them, and tidemark reads them by path
   (TidemarkConfig.paths.dbt_table). A rebuild's shadow reconciled before its swap has a
   warehouse of its own (TIDEMARK_DBT_WAREHOUSE, in the shadow's folder). #}
{% macro spark__create_schema(relation) -%}
{%- set prefix = env_var('TIDEMARK_DBT_SCHEMA_PREFIX', '') -%}
{%- set name = relation.schema -%}
{%- if name.startswith(prefix) -%}{%- set name = name[prefix | length:] -%}{%- endif -%}
{%- call statement('create_schema') -%}
    create schema if not exists {{ relation }}
    location '{{ env_var('TIDEMARK_DBT_WAREHOUSE', env_var('TIDEMARK_DATA_ROOT') ~ '/dbt/warehouse') }}/{{ name }}.db'
{%- endcall %}
{%- endmacro %}

{# Every recon class, explained first (var recon_classes in dbt_project.yml: the one list). #}
{% macro recon_classes() -%}
{{ return(var('recon_classes')['explained'] + var('recon_classes')['unexplained']) }}
{%- endmacro %}

{# 'a', 'b', 'c' from a list of strings (for SQL's in (...)). #}
{% macro quoted(values) -%}
{% for v in values %}'{{ v }}'{% if not loop.last %}, {% endif %}{% endfor %}
{%- endmacro %}
