{# The path of a lake table under the data root, e.g. lake_path('bronze', 'transactions'). #}
{% macro lake_path(layer, name) -%}
{{ env_var('TIDEMARK_DATA_ROOT') }}/lake/{{ layer }}/{{ name }}
{%- endmacro %}

{# A job's parameter from the registry (passed as --vars), with a clear error when absent. #}
{% macro job_param(job, key) -%}
{%- set jobs = var('jobs') -%}
{%- if job not in jobs or key not in jobs[job] -%}
{{ exceptions.raise_compiler_error("job parameter " ~ job ~ "." ~ key ~ " was not passed in --vars; run dbt through `tidemark-dbt` (or `make dbt ARGS=...`), which passes the job registry") }}
{%- endif -%}
{{ jobs[job][key] }}
{%- endmacro %}

{# Spark names schemas without the target schema prefix: staging, batch, recon. #}
{% macro generate_schema_name(custom_schema_name, node) -%}
{{ custom_schema_name if custom_schema_name else target.schema }}
{%- endmacro %}

{# Every recon class, explained first (var recon_classes in dbt_project.yml: the one list). #}
{% macro recon_classes() -%}
{{ return(var('recon_classes')['explained'] + var('recon_classes')['unexplained']) }}
{%- endmacro %}

{# 'a', 'b', 'c' from a list of strings (for SQL's in (...)). #}
{% macro quoted(values) -%}
{% for v in values %}'{{ v }}'{% if not loop.last %}, {% endif %}{% endfor %}
{%- endmacro %}
