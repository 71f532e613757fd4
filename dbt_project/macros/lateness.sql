{#
  Which stream batch read each bronze row, and was the row behind that batch's watermark?

  Every micro-batch of a job records, per Delta source, the bronze versions it read
  (version_from exclusive, version_to inclusive) and the watermark Spark used to drop late rows
  in it (the previous batch's watermark). A bronze row carries its commit version (row
  tracking), so the batch side can replay the stream's decision row by row. `source` is the
  stream the events come from (a join reads several); its event time is the stream's own.
  read_only keeps only the rows the stream has read: reconciliation is as of the stream's
  position, so a recon that runs while bronze is ahead of the job explains nothing away.
  scoped keeps only the events of the days an incremental run recomputes (recon_scope.sql);
  after_version only the rows committed after that bronze version; ingest_batch_floor (with
  it) says their least ingestion batch id, so that bronze's older files are not read.
#}
{% macro classify_lateness(job, events_ref, source=none, read_only=true, scoped=true,
                           after_version=none, ingest_batch_floor=none) -%}
    {%- set source = source or var('jobs')[job]['source'] -%}
    {%- set event_time = var('jobs')[job]['sources'][source] -%}
    {#- a job that reads only some of its source's rows (JobSpec.reads) counts only those late -#}
    {%- set reads = var('jobs')[job].get('reads', {}).get(source) -%}
    select
        events.*,
        batches.batch_id is not null as seen_by_stream,
        case
            -- a batch folded into the job's rollup row: its late rows were recorded by row id
            when batches.rolled_up then folded_late.row_id is not null
            else coalesce(events.{{ event_time }} <= batches.late_threshold, false)
        end as is_late,
        -- the batch that read the row reported none of its input: it re-ran after a stop or a
        -- crash with its write already committed (the Delta sink skipped it), so what the run
        -- cut short dropped is in no rows_dropped_by_watermark
        case
            when batches.rolled_up then coalesce(folded_late.report_lost, false)
            else coalesce(batches.report_lost, false)
        end as report_lost
    {% if reads -%}
    -- the rows the job reads at all: the only ones it deduplicates and counts late
    from (select * from {{ events_ref }} where {{ reads }}) as events
    {%- else -%}
    from {{ events_ref }} as events
    {%- endif %}
    left join ({{ batch_of_each_version(job, source) }}) as batches
        on events.bronze_version = batches.read_version
    left join ({{ folded_late_rows(job, source) }}) as folded_late
        on batches.rolled_up and folded_late.row_id = events.bronze_row_id
    where true
    {% if read_only -%}
    -- as of the stream's position: bronze rows it has not read yet are no part of either side
    and events.bronze_version <= ({{ stream_position(job, source) }})
    {%- endif %}
    {% if after_version is not none -%}
    -- the rows past a bronze version, before they meet the batches
    and events.bronze_version > {{ after_version }}
    {% endif -%}
    {% if ingest_batch_floor is not none -%}
    -- and so in no file older than their first ingestion batch (file statistics skip them)
    and events.ingest_batch_id >= {{ ingest_batch_floor }}
    {% endif -%}
    {% if scoped and recon_from(job) is not none -%}
    -- the events of the days this run recomputes (macros/recon_scope.sql)
    and {{ events_in_recon_scope(job, 'events.' ~ event_time) }}
    {%- endif %}
{%- endmacro %}

{# The last bronze version of the source the job's committed batches read (-1: none yet). #}
{% macro stream_position(job, source) -%}
    select coalesce(max(version_to), -1) as read_through
    from ({{ batches_read(job, source) }})
{%- endmacro %}

{#
  Each committed batch of a job: the versions of one source it read, and its late threshold.
  A rollup row (rolled_up) stands for the old batches retention folded: the versions they read
  together; which of their rows were late is in folded_late_rows.
#}
{% macro batches_read(job, source) -%}
        select progress.batch_id, progress.late_threshold, progress.rolled_up,
               not progress.rolled_up and coalesce(progress.num_input_rows, 0) = 0
                   as report_lost,
               read.version_from, read.version_to
        from {{ ref('stg_stream_progress') }} as progress
        lateral view inline(progress.source_versions) read
        where progress.job = '{{ job }}' and read.source_table = '{{ source }}'
{%- endmacro %}

{#
  batches_read once per bronze version a batch read (read_version): a row's batch is then an
  equi-join on its version, hashed, where the range (version_from, version_to] compared every
  row with every batch (rows x batches: 5,760 batches a day at a 15 s trigger).
#}
{% macro batch_of_each_version(job, source) -%}
        select batches.*, read_version
        from ({{ batches_read(job, source) }}) as batches
        lateral view explode(
            if(version_to > version_from, sequence(version_from + 1, version_to), array())
        ) read_versions as read_version
{%- endmacro %}

{# The bronze rows of one source that a job's folded batches dropped as late, by row id. #}
{% macro folded_late_rows(job, source) -%}
        select row_id, bool_or(coalesce(report_lost, false)) as report_lost
        from {{ ref('stg_stream_late_rows') }}
        where job = '{{ job }}' and source_table = '{{ source }}'
        group by row_id
{%- endmacro %}

{#
  One row per distinct event (copies share the stream's dedup key): the first copy's columns,
  and whether the stream counted it (at least one copy arrived ahead of its watermark). key:
  one column or a list of them.
#}
{% macro distinct_events(classified, columns, key='event_id') -%}
{%- set key = [key] if key is string else key -%}
    select
        {% for k in key %}{{ k }},
        {% endfor %}{% for column in columns %}min_by({{ column }}, bronze_version) as {{ column }},
        {% endfor %}bool_or(not is_late) as counted_by_stream
    from {{ classified }}
    group by {{ key | join(', ') }}
{%- endmacro %}

{#
  Each row once in basis all (the truth) and again in basis on_time when the stream counted it:
  a lateral view after the from of a select over rows with counted_by_stream. One pass over the
  rows, where a union of two selects would compute everything before them twice.
#}
{% macro each_basis() -%}
    lateral view explode(if(counted_by_stream, array('all', 'on_time'), array('all'))) b as basis
{%- endmacro %}

{# The sliding windows [start, start + size) that contain event_time, aligned to the epoch. #}
{% macro sliding_window_starts(ts_col, size_seconds, slide_seconds) -%}
    timestamp_seconds(
        (floor(unix_micros({{ ts_col }}) / {{ slide_seconds * 1000000 }}) - k) * {{ slide_seconds }}
    )
{%- endmacro %}
