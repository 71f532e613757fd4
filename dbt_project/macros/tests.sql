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
