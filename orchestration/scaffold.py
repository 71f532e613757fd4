"""``tidemark new``: a commented stream or job file that loads as it is.

    tidemark new stream readings                    # jobs/readings.py: STREAM = StreamSchema(...)
    tidemark new job hot_sensors --source readings  # jobs/hot_sensors.sql
    tidemark new job hot_sensors --python --source readings   # jobs/hot_sensors.py

The file goes into ``--folder``, else the first folder of ``TIDEMARK_JOBS_PATH``, else
``./jobs``. Every header key and argument is written out with its meaning; edit, then run
``tidemark check``.
"""

from __future__ import annotations

from pathlib import Path

from streaming_jobs.config import TidemarkConfig
from streaming_jobs.schemas import NAME

STREAM = '''"""{name}: what one line of this stream is (edit the fields to match your JSON lines).

Land files of JSON lines in <data root>/landing/{name}/ (write each file under a temporary
name starting with "." or "_", then rename it: a file is read once, when it appears).
"""

from pyspark.sql import types as T

from streaming_jobs.schemas import Field, StreamSchema

STREAM = StreamSchema(
    name="{name}",
    # the TimestampType field windows and watermarks use (ISO-8601 text in the JSON, UTC)
    event_time="event_time",
    # the dedup key: one column ("event_id"), several (("device_id", "event_time")), or None
    # (then only exact duplicate lines count as one event)
    key="event_id",
    fields=(
        Field("event_id", T.StringType(), "unique id of the event; a resent copy repeats it"),
        Field("device_id", T.StringType(), "what sent it"),
        Field("value", T.DoubleType(), "the reading"),
        Field("event_time", T.TimestampType(), "when it happened (UTC)"),
    ),
    # where the lines come from: "landing" (landing/{name}/), "kafka" (topic
    # tidemark.{name}, or name one with topic="..."), or None: TIDEMARK_SOURCE decides
    source=None,
)
'''

SQL_JOB = '''-- {name}: events of {source} per 5-minute window (edit this line: it is the job's description).
--
-- Header keys (README "Add your own stateful job" lists every one):
--   source      the stream read as `events` (and by its own name)          required
--   keys        output columns that identify a row, window bounds included   required
--   watermark   how late an event may be; bounds the state of every operator required
--   measures    other output columns the recon compares (none: a set)        optional
--   joins       more streams, each read by its name (join them with a time bound)
--   window_end  the key holding the end of a window or session (default window_end)
--   open_when   recon condition for rows the stream cannot have emitted yet
--   output_mode append (default) or update; tolerance; partition_by; warn_rows; critical_rows
--
-- source: {source}
-- keys: window_start, window_end
-- measures: events
-- watermark: 10 minutes
select
    window.start as window_start,
    window.end as window_end,
    count(*) as events
from events
group by window({event_time}, '5 minutes')
'''

PY_JOB = '''"""{name}: events of {source} per 5-minute window (edit: the first line is the description).

State: one count per open window, evicted when the watermark passes the window's end.
"""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from streaming_jobs.registry import stream_schema
from streaming_jobs.spec import JobSpec, StateBound
from streaming_jobs.stateful.dedup import dedup_stream

def build(events: DataFrame, watermark: str) -> DataFrame:
    """Pure: bronze rows of {source} in, gold rows out (the same code runs on a static frame)."""
    # the stream's declared dedup key (looked up when the job runs, after every file loaded)
    deduped = dedup_stream(events, stream_schema("{source}"), watermark)
    return (deduped.groupBy(F.window("{event_time}", "5 minutes"))
            .agg(F.count("*").alias("events"))
            .select(F.col("window.start").alias("window_start"),
                    F.col("window.end").alias("window_end"), "events"))


SPEC = JobSpec(
    name="{name}",
    description=__doc__.splitlines()[0].split(": ", 1)[1],
    source="{source}",
    keys=("window_start", "window_end"),
    measures=("events",),
    event_time="{event_time}",
    state=StateBound(watermark="10 minutes"),
    output_mode="append",
    build=build,
    # the same definition in Spark SQL over `events`: tidemark generates its reconciliation
    batch_sql="""
        select window.start as window_start, window.end as window_end, count(*) as events
        from events group by window({event_time}, '5 minutes')
    """,
)
'''


def target_folder(folder: str | None) -> Path:
    if folder:
        return Path(folder)
    configured = TidemarkConfig.from_env().jobs_path
    return configured[0] if configured else Path("jobs")


def scaffold(kind: str, name: str, *, folder: str | None = None, source: str | None = None,
             sql: bool = True) -> Path:
    """Write the file; returns its path. Refuses to overwrite."""
    if not NAME.match(name):
        raise ValueError(f"{name!r}: a name is lower case letters, digits and _, starting with a "
                         "letter")
    out = target_folder(folder)
    if kind == "stream":
        path, text = out / f"{name}.py", STREAM.format(name=name)
    else:
        from streaming_jobs.registry import stream_schema

        if not source:
            raise ValueError("tidemark new job: name the stream it reads with --source STREAM")
        try:
            stream = stream_schema(source)
        except KeyError as exc:
            raise ValueError(f"tidemark new job {name}: {exc.args[0]} To start one, run "
                             f"'tidemark new stream {source}' and add its folder to "
                             "TIDEMARK_JOBS_PATH.") from None
        values = {"name": name, "source": source, "event_time": stream.event_time}
        path = out / f"{name}.{'sql' if sql else 'py'}"
        text = (SQL_JOB if sql else PY_JOB).format(**values)
    if path.exists():
        raise FileExistsError(f"{path} exists; pick another name or delete it first")
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
