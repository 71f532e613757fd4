{#
  A view whose stored query is already this model's is left as it is: a run re-creates only the
  views whose SQL changed (a staging view after its stream's schema or the project changed).
  The bronze staging views read their tables by path, so an unchanged view already reads the
  latest rows. Re-creating one cost a statement
  that has Spark analyze the whole view (its Delta tables' snapshots included) at the head of
  every build, before any batch model could start (docs/benchmarks.md, "Unchanged views").
  dbt's --full-refresh re-creates every view. Spark stores a view's text from its first token
  on (without the comments before it) and dbt-spark caches it with the relation (`show table
  extended`, the "View Text" line), so the two are compared without their comment lines and
  with each run of whitespace as one space; any other difference re-creates the view.
#}
{% materialization view, adapter='spark' -%}
  {%- set existing = load_cached_relation(this) -%}
  {%- if existing is not none and existing.is_view and not should_full_refresh()
        and view_text_is(existing, sql) -%}
    {{ run_hooks(pre_hooks) }}
    {%- call noop_statement('main', 'unchanged view ' ~ this ~ ': kept', 'OK', 0) -%}{%- endcall -%}
    {{ run_hooks(post_hooks) }}
    {{ return({'relations': [this.incorporate(type='view')]}) }}
  {%- endif -%}
  {{ return(create_or_replace_view()) }}
{%- endmaterialization %}

{# Whether the view's stored query (its "View Text", as dbt-spark cached it) is `sql`. #}
{% macro view_text_is(relation, sql) -%}
  {%- set information = relation.information or '' -%}
  {%- if 'View Text: ' not in information or '\nView Original Text: ' not in information -%}
    {{ return(false) }}
  {%- endif -%}
  {%- set stored = information.split('View Text: ', 1)[1].split('\nView Original Text: ', 1)[0] -%}
  {{ return(sql_without_comment_lines(stored) == sql_without_comment_lines(sql)) }}
{%- endmacro %}

{# The SQL without the lines that are only a comment, its whitespace runs as one space. #}
{% macro sql_without_comment_lines(sql) -%}
  {%- set kept = [] -%}
  {%- for line in sql.split('\n') if not line.strip().startswith('--') -%}
    {%- do kept.append(line) -%}
  {%- endfor -%}
  {{ return((kept | join('\n')).split() | join(' ')) }}
{%- endmacro %}
