{#
  Per job and source: the lateness replay as running counts. A bronze row's lateness is fixed
  once a batch of the stream has read it, so each run replays only the rows past the version
  the last run counted up to (counted_upto) and adds them to its counts. Rows the stream has
  not read yet are counted as such every time. The counts start again from every row when the
  stream was rebuilt or restored (another checkpoint query id), the dbt project changed (the
  fingerprint), or a full reconciliation was asked for (var recon_full). A job nothing new
  reached keeps its counts without reading bronze, and a stream whose bronze holds no row
  yet has nothing to replay (recon_positions' bronze_empty, orchestration/recon/recon_scope.py).
#}
{%- set previous = load_relation(this) if execute else none -%}
{#- carried only from a table with every running count (an older one is counted again) -#}
{%- set carried = previous is not none and not run_var('recon_full', false)
    and ['counted_upto', 'late_events_report_lost'] | reject('in', adapter.get_columns_in_relation(
        previous) | map(attribute='name') | list) | list | length == 0 -%}
{%- set now = {} -%}
{%- for p in run_var('recon_positions', []) -%}
{%- do now.update({p['job'] ~ '/' ~ p['source']: p}) -%}
{%- endfor %}
{#- what the last run counted up to, per job, source and lineage (query id, fingerprint) -#}
{%- set counted = {} -%}
{%- if carried -%}
{%- for row in run_query('select job, source, query_id, fingerprint, counted_upto from '
                         ~ this).rows -%}
{%- do counted.update({row[0] ~ '/' ~ row[1] ~ '/' ~ row[2] ~ '/' ~ row[3]: row[4]}) -%}
{%- endfor -%}
{%- endif %}

with

{% if carried -%}
-- joined to in final when carried (sqlfluff renders this branch without that one)
previous as (  -- noqa: ST03

    select * from {{ this }}

),
{%- endif %}

{% for job, params in var('jobs').items() %}
{% for source in params['sources'] %}
{%- set here = now.get(job ~ '/' ~ source, {}) -%}
{%- set counted_upto = here.get('version_to', -1) | int %}
{%- set lineage = job ~ '/' ~ source ~ '/' ~ here.get('query_id', '') ~ '/'
                  ~ here.get('fingerprint', '') -%}
{%- if here.get('bronze_empty') %}
replay_{{ job }}__{{ source }} as (

    -- the stream's bronze holds no row yet: nothing to replay, nothing unread
    select '{{ job }}' as job, '{{ source }}' as source,
           cast({{ counted_upto }} as bigint) as counted_upto,
           '{{ here.get("query_id", "") }}' as query_id,
           '{{ here.get("fingerprint", "") }}' as fingerprint,
           cast(0 as bigint) as late_events_replayed,
           cast(0 as bigint) as late_events_report_lost,
           cast(0 as bigint) as events_skipped,
           cast(0 as bigint) as events_not_yet_read

),
{%- elif nothing_new(job) and counted.get(lineage) == counted_upto %}
replay_{{ job }}__{{ source }} as (

    -- nothing new reached the job (neither bronze nor its stream moved) since the last run,
    -- which counted up to this very position: its counts stand (none to add, none unread)
    select job, source, counted_upto, query_id, fingerprint,
           cast(0 as bigint) as late_events_replayed,
           cast(0 as bigint) as late_events_report_lost,
           cast(0 as bigint) as events_skipped,
           events_not_yet_read
    from previous
    where job = '{{ job }}' and source = '{{ source }}'
        and query_id = '{{ here.get("query_id", "") }}'
        and fingerprint = '{{ here.get("fingerprint", "") }}'

),
{%- else %}
replay_{{ job }}__{{ source }} as (

    select
        '{{ job }}' as job,
        '{{ source }}' as source,
        cast({{ counted_upto }} as bigint) as counted_upto,
        '{{ here.get("query_id", "") }}' as query_id,
        '{{ here.get("fingerprint", "") }}' as fingerprint,
        count_if(is_late) as late_events_replayed,
        -- of those, the ones read by a batch whose own report was lost (macros/lateness.sql)
        count_if(is_late and report_lost) as late_events_report_lost,
        -- never read although the stream has read past them (a stream started later)
        count_if(not seen_by_stream and bronze_version <= {{ counted_upto }}) as events_skipped,
        count_if(not seen_by_stream and bronze_version > {{ counted_upto }}) as events_not_yet_read
    {%- set after = counted.get(lineage, -1) | int -%}
    {#- the least ingestion batch id past the version the scope was taken from (recon_scope.py):
        it bounds the rows past this run's own start when that is no earlier -#}
    {%- set floor = here.get('replay_floor') -%}
    {%- set floor = floor['ingest_batch_id']
                    if floor and floor['after'] >= 0 and after >= floor['after'] else none %}
    -- the rows past what the last run counted (all of them when it counted another lineage)
    from ({{ classify_lateness(job, ref('stg_' ~ source), source, read_only=false, scoped=false,
                               after_version=after if after >= 0 else none,
                               ingest_batch_floor=floor) }})

),
{%- endif %}
{% endfor %}
{% endfor %}

replayed as (

    {% for job, params in var('jobs').items() %}{% for source in params['sources'] %}
    select * from replay_{{ job }}__{{ source }}
    {% if not loop.last %}union all{% endif %}
    {% endfor %}{% if not loop.last %}union all{% endif %}{% endfor %}

),

final as (

    select
        replayed.job,
        replayed.source,
        replayed.counted_upto,
        replayed.query_id,
        replayed.fingerprint,
        {% if carried -%}
        replayed.late_events_replayed + coalesce(previous.late_events_replayed, 0)
            as late_events_replayed,
        replayed.late_events_report_lost + coalesce(previous.late_events_report_lost, 0)
            as late_events_report_lost,
        replayed.events_skipped + coalesce(previous.events_skipped, 0) as events_skipped,
        {%- else -%}
        replayed.late_events_replayed,
        replayed.late_events_report_lost,
        replayed.events_skipped,
        {%- endif %}
        replayed.events_not_yet_read
    from replayed
    {% if carried -%}
    left join previous
        on previous.job = replayed.job and previous.source = replayed.source
        and previous.query_id = replayed.query_id and previous.fingerprint = replayed.fingerprint
    {%- endif %}

)

select * from final
