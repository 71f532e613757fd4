{#
  Batch models that compose their rows instead of recomputing them (user_sessions,
  user_activity_profile): an incremental run reads the rows the table holds and the distinct
  events the stream read since the table was last composed, so its cost follows the new events,
  not the length of history. Each row carries composed_through: the bronze version of its source
  the stream had read up to when the row's run composed it.

  The position comes from the table itself, not from the last recorded reconciliation: a run
  killed after the table's commit and before recon_positions recorded it must not add its events
  twice. `first` (var recon_from, macro compose_from) bounds the new events' time from below: recon_scope.py takes it
  from the event times of the files bronze added since the last recorded position, which hold
  every row past the table's own.
#}

{# Whether this run composes (an incremental run that has new events), and from where. #}
{% macro compose_position(job, source) -%}
{%- set first = compose_from(job) -%}
{%- if first is none or first == '9999-12-31' or not execute -%}
{{ return(none) }}
{%- endif -%}
{%- set query = 'select coalesce(max(composed_through), -1) from ' ~ this -%}
{%- set through = run_query(query).columns[0].values()[0] | int -%}
{#- the least ingestion batch id of bronze's files past the last recorded position
    (recon_scope.py): a bound for the rows past this table's own, which is no earlier -#}
{%- set floor = none -%}
{%- for p in run_var('recon_positions', []) -%}
{%- if p['job'] == job and p['source'] == source and p.get('replay_floor')
       and through >= p['replay_floor']['after'] >= 0 -%}
{%- set floor = p['replay_floor']['ingest_batch_id'] -%}
{%- endif -%}
{%- endfor -%}
{{ return({'first': first, 'through': through, 'floor': floor}) }}
{%- endmacro %}

{#
  CTEs new_rows, new_events and fresh (with a trailing comma): the distinct events the stream
  read past the table's position, less copies of events the table holds already. A copy has its
  event's time, so only bronze files from the first recomputed day on are read for them; and a
  copy read later is never on time when the first was late (the watermark only grows), so it
  changes nothing.
#}
{% macro fresh_events(job, source, columns, at) -%}
new_rows as (

    {{ classify_lateness(job, ref('stg_' ~ source), source, scoped=false,
                         after_version=at['through'], ingest_batch_floor=at['floor']) }}

),

new_events as (

    {{ distinct_events('new_rows', columns) }}

),

fresh as (

    select * from new_events
    left anti join (
        select event_id from {{ ref('stg_' ~ source) }}
        where bronze_version <= {{ at['through'] }}
            and {{ var('jobs')[job]['sources'][source] }} >= timestamp'{{ at['first'] }} 00:00:00'
    ) as already_held using (event_id)

),
{%- endmacro %}

{#
  Merge blocks (basis, user_id, first_at, last_at, and the sums to add) into runs: a block opens
  a run when it starts more than `gap_seconds` after every earlier block of its user ends (the
  same rule as a gap between consecutive events), measured in `unit` (micros or millis, as the
  model's full form measures it). Adds run_number.
#}
{% macro number_runs(blocks, gap_seconds, unit='micros') -%}
{%- set per_second = 1000000 if unit == 'micros' else 1000 -%}
    select
        *,
        sum(opens_run) over (
            partition by basis, user_id order by first_at, last_at
            rows between unbounded preceding and current row
        ) as run_number
    from (
        select
            *,
            case
                when max(last_at) over earlier is null
                    or unix_{{ unit }}(first_at) - unix_{{ unit }}(max(last_at) over earlier)
                       > {{ gap_seconds * per_second }}
                then 1 else 0
            end as opens_run
        from {{ blocks }}
        window earlier as (partition by basis, user_id order by first_at, last_at
                           rows between unbounded preceding and 1 preceding)
    )
{%- endmacro %}
