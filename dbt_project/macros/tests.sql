{# Fails with the rows a recon model could not explain: the stream and the batch disagree. #}
{% test no_unexplained_rows(model) %}
    select *
    from {{ model }}
    where recon_class in ('value_mismatch', 'missing_in_stream', 'missing_in_batch')
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
    {%- set share = var('jobs')[job]['warn_share'] -%}
    select
        count(*) as rows_compared,
        count_if(recon_class in ('window_open', 'late_dropped')) as explained_rows,
        {{ share }} as warn_share
    from {{ model }}
    having count_if(recon_class in ('window_open', 'late_dropped')) > {{ share }} * count(*)
{% endtest %}
