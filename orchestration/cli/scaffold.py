"""``tidemark new``: a commented stream or job file that loads as it is.

    tidemark new stream readings                    # jobs/readings.py: STREAM = StreamSchema(...)
    tidemark new job hot_sensors --source readings  # jobs/hot_sensors.sql
    tidemark new job hot_sensors --python --source readings   # jobs/hot_sensors.py
    tidemark new job device_activity --python --keyed --source readings   # keyed state, a TTL

The file goes into ``--folder``, else the first folder of ``TIDEMARK_JOBS_PATH``, else
``./jobs``. Every header key and argument is written out with its meaning; edit, then run
``tidemark check``.
"""

from __future__ import annotations

from pathlib import Path

from streaming_jobs.core.config import TidemarkConfig
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

SQL_JOB = """-- {name}: events of {source} per 5-minute window (edit this line: it is the job's description).
--
-- Header keys (docs/jobs.md lists every one):
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
"""

PY_JOB = '''"""{name}: events of {source} per 5-minute window (edit: the first line is the description).

State: one count per open window, evicted when the watermark passes the window's end.
"""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from streaming_jobs.storage.registry import stream_schema
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


KEYED_JOB = '''"""{name}: each {key}'s current run of activity in {source}, forgotten after an idle TTL.

(Edit: the first line is the job's description.) Per {key}: ``events`` (distinct events) and
``active_seconds`` (last - first) of its current *epoch*, the run of its events in which no two
consecutive ones are more than ``TTL`` apart in event time; a {key} idle for longer is
forgotten, and its next event starts from zero. Output is upserted per {key} (update mode:
MERGE, idempotent per batch), so gold holds each {key}'s latest epoch.

State is keyed (``transformWithStateInPandas``): per {key}, its recent epochs. It is bounded
by the TTL, in event time: an event-time timer at (last event + TTL) removes the {key} once the
watermark passes it. Spark's own state TTL (``ttlDurationMs``) counts processing time, so the
result would depend on when the job ran, and its batch recomputation could not agree.
"""

from typing import Iterator

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

from streaming_jobs.intervals import interval_seconds
from streaming_jobs.storage.registry import stream_schema
from streaming_jobs.spec import JobSpec, StateBound
from streaming_jobs.stateful.dedup import dedup_stream
from streaming_jobs.stateful.epochs import Epochs
from streaming_jobs.stateful.frames import epoch_ms, timestamps

TTL = "30 minutes"  # idle this long in event time, and a {key} is forgotten
WATERMARK = "10 minutes"  # how late an event may arrive; later ones are dropped and counted
OUTPUT = ("{key} string, events long, active_seconds double, first_event timestamp, "
          "last_event timestamp")
# the state of one {key}: its epochs as parallel arrays, and the timer it has registered
STATE = "first array<long>, last array<long>, count array<long>, timer long"


def latest(key: str, epochs: Epochs) -> pd.DataFrame:
    """The output row of a {key}: its newest epoch."""
    i = int(np.argmax(epochs.first))
    return pd.DataFrame({{
        "{key}": [key], "events": [int(epochs.count[i])],
        "active_seconds": [(int(epochs.last[i]) - int(epochs.first[i])) / 1000.0],
        "first_event": timestamps([epochs.first[i]]), "last_event": timestamps([epochs.last[i]]),
    }})


class Processor(StatefulProcessor):
    """Spark calls ``handleInputRows`` once per {key} that has new rows in a batch, and
    ``handleExpiredTimer`` once per {key} whose timer the watermark has passed."""

    def __init__(self, ttl_ms: int) -> None:
        self.ttl_ms = ttl_ms

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.state = handle.getValueState("epochs", STATE)  # one value per {key}

    def _load(self) -> tuple[Epochs, int | None]:
        if not self.state.exists():
            return Epochs.empty(), None
        first, last, count, timer = self.state.get()
        return Epochs(np.asarray(first, dtype=np.int64), np.asarray(last, dtype=np.int64),
                      np.asarray(count, dtype=np.int64),
                      np.zeros(len(first), dtype=np.float64)), timer

    def _store(self, epochs: Epochs, timer: int | None, watermark_ms: int) -> None:
        # epochs no future event can reach (last + TTL at or behind the watermark) are dropped
        epochs = epochs.forget(watermark_ms, self.ttl_ms)
        if not len(epochs):
            self.state.clear()  # idle past the TTL: forgotten
            return
        wanted = int(epochs.last.max()) + self.ttl_ms  # the event-time timer
        if timer is not None and timer != wanted and timer > watermark_ms:
            self.handle.deleteTimer(timer)
        if timer != wanted:
            self.handle.registerTimer(wanted)
        self.state.update((epochs.first.tolist(), epochs.last.tolist(), epochs.count.tolist(),
                           wanted))

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        epochs, timer = self._load()
        for batch in rows:  # pandas frames of this {key}'s new rows, in any event-time order
            times = epoch_ms(batch["{event_time}"])
            epochs = epochs.merge(times, np.zeros(len(times)), self.ttl_ms)
        # the watermark as of this batch (epoch ms): how far event time has surely come
        self._store(epochs, timer, timerValues.getCurrentWatermarkInMs())
        yield latest(key[0], epochs)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        epochs, _ = self._load()
        self._store(epochs, None, timerValues.getCurrentWatermarkInMs())
        return iter([])  # forgetting changes no output row

    def close(self) -> None:
        pass


def build(events: DataFrame, *, watermark: str, ttl: str) -> DataFrame:
    """Pure: bronze rows of {source} in, gold rows out (a static frame gives the same rows)."""
    ttl_ms = interval_seconds(ttl) * 1000
    deduped = dedup_stream(events, stream_schema("{source}"), watermark)
    grouped = (deduped.where(F.col("{key}").isNotNull())
               .select("{key}", "{event_time}").groupBy("{key}"))
    if deduped.isStreaming:
        # "Update": a {key}'s row is replaced at each batch; "EventTime": timers fire on the
        # watermark (the stream's event time), not on the wall clock
        return grouped.transformWithStateInPandas(Processor(ttl_ms), OUTPUT, "Update",
                                                  "EventTime")

    def whole(frame: pd.DataFrame) -> pd.DataFrame:
        times = epoch_ms(frame["{event_time}"])
        return latest(frame["{key}"].iloc[0],
                      Epochs.empty().merge(times, np.zeros(len(times)), ttl_ms))

    return grouped.applyInPandas(whole, OUTPUT)


SPEC = JobSpec(
    name="{name}",
    description=__doc__.splitlines()[0].split(": ", 1)[1],
    source="{source}",
    keys=("{key}",),
    measures=("events", "active_seconds"),
    event_time="{event_time}",
    state=StateBound(watermark=WATERMARK, ttl=TTL),
    output_mode="update",
    build=build,
    tolerance=1e-6,
    # The same definition in Spark SQL over `events` (each distinct event once), for
    # reconciliation: number each {key}'s epochs (a gap of more than TTL starts one), keep the
    # newest. tidemark generates the job's batch and recon dbt models from it.
    batch_sql=f"""
        with ordered as (
            select {key}, {event_time},
                   lag({event_time}) over (partition by {key} order by {event_time}) as previous
            from events
            where {key} is not null
        ),
        numbered as (
            select *, sum(case when previous is null
                               or {event_time} > previous + interval {{TTL}} then 1 else 0 end)
                      over (partition by {key} order by {event_time}
                            rows between unbounded preceding and current row) as epoch
            from ordered
        ),
        epochs as (
            select {key}, epoch, count(*) as events, min({event_time}) as first_event,
                   max({event_time}) as last_event,
                   row_number() over (partition by {key} order by epoch desc) as newest
            from numbered
            group by {key}, epoch
        )
        select {key}, events,
               (unix_millis(last_event) - unix_millis(first_event)) / 1000.0 as active_seconds,
               first_event, last_event
        from epochs
        where newest = 1
    """,
)
'''


def keyed_column(stream, wanted: str | None) -> str:
    """The column a keyed job groups by: ``wanted``, else the stream's first text field that is
    neither its dedup key nor its event time (``device_id`` in a new stream's file)."""
    from pyspark.sql import types as T

    names = stream.field_names
    if wanted:
        if wanted not in names:
            raise ValueError(
                f"--key {wanted}: stream {stream.name} has no such field (it has "
                f"{', '.join(names)})"
            )
        return wanted
    for field in stream.fields:
        if (
            isinstance(field.dtype, T.StringType)
            and field.name != stream.event_time
            and field.name not in stream.dedup_key
        ):
            return field.name
    raise ValueError(
        f"stream {stream.name} has no text field to group by besides its key: name "
        "one with --key COLUMN"
    )


def target_folder(folder: str | None) -> Path:
    if folder:
        return Path(folder)
    configured = TidemarkConfig.from_env().jobs_path
    return configured[0] if configured else Path("jobs")


def scaffold(
    kind: str,
    name: str,
    *,
    folder: str | None = None,
    source: str | None = None,
    sql: bool = True,
    keyed: bool = False,
    key: str | None = None,
) -> Path:
    """Write the file; returns its path. Refuses to overwrite."""
    if not NAME.match(name):
        raise ValueError(
            f"{name!r}: a name is lower case letters, digits and _, starting with a letter"
        )
    out = target_folder(folder)
    if kind == "stream":
        path, text = out / f"{name}.py", STREAM.format(name=name)
    else:
        from streaming_jobs.storage.registry import stream_schema

        if not source:
            raise ValueError("tidemark new job: name the stream it reads with --source STREAM")
        try:
            stream = stream_schema(source)
        except KeyError as exc:
            raise ValueError(
                f"tidemark new job {name}: {exc.args[0]} To start one, run "
                f"'tidemark new stream {source}' and add its folder to "
                "TIDEMARK_JOBS_PATH."
            ) from None
        values = {"name": name, "source": source, "event_time": stream.event_time}
        path = out / f"{name}.{'sql' if sql and not keyed else 'py'}"
        if keyed:
            text = KEYED_JOB.format(**values, key=keyed_column(stream, key))
        else:
            text = (SQL_JOB if sql else PY_JOB).format(**values)
    if path.exists():
        raise FileExistsError(f"{path} exists; pick another name or delete it first")
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
