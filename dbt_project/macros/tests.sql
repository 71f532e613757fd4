{# Fails with the rows a recon model could not explain: the stream and the batch disagree. #}
{% test no_unexplained_rows(model) %}
    select *
    from {{ model }}
    where recon_class in ({{ quoted(var('recon_classes')['unexplained']) }})
{% endtest %}

{# Fails with the rows whose recon_class is missing or not one of the known classes. #}
{% test recon_class_is_known(model) %}
    select *
    from {{ model }}
    where recon_class is null or recon_class not in ({{ quoted(recon_classes()) }})
{% endtest %}

{# Fails when the batch replay and the stream disagree on how many events were dropped late. #}
{% test late_counts_agree(model) %}
    select *
    from {{ model }}
    where late_events_replayed <> late_events_reported
{% endtest %}

{# Fails with every key that appears more than once. #}
{% test unique_combination(model, columns) %}
    select {{ columns | join(', ') }}, count(*) as copies
    from {{ model }}
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
    having count_if(recon_class in ({{ quoted(explained) }})) > {{ share }} * count(*)
{% endtest %}
