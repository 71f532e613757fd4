"""Run streaming queries: incrementally (``availableNow``) and report what they did.

`run_bronze` and `run_job` start the query, wait for it to finish everything that has arrived,
flush its progress to ``ops/stream_progress`` and return `RunMetrics`, which Dagster turns into
materialization metadata.
"""

from __future__ import annotations

import logging
import re
import shutil
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone

from pyspark.sql import SparkSession
from pyspark.sql.streaming import DataStreamWriter

from streaming_jobs.core.checkpoints import (
    MIN_DELTAS_FOR_SNAPSHOT,
    STATE_MAINTENANCE_SECONDS,
    last_committed_batch,
    snapshots_pending,
)
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.runtime.gold import gold_writer, sink_version_of
from streaming_jobs.runtime.ingestion import bronze_writer
from streaming_jobs.core.checkpoints import query_name
from streaming_jobs.spec import JobSpec
from streaming_jobs.core.delta_log import latest_version, rows_written
from streaming_jobs.storage.failures import held
from streaming_jobs.runtime.locate import raised_in_python, record_job_failure
from streaming_jobs.core.checkpoints import checkpoint_lock, relocate_state_schemas
from streaming_jobs.runtime.progress import (
    forget_previous_lineage,
    progress_log,
    restore_lost_progress,
)
from streaming_jobs.storage.registry import stream_schema
from streaming_jobs.storage import swaps
from streaming_jobs.storage.repairs import mend_at_start
from streaming_jobs.storage.restores import finish_pending


LOG = logging.getLogger(__name__)
INCREMENTAL = "an incremental run"


class StreamRunError(RuntimeError):
    """A streaming query failed; the message names the query and its checkpoint."""


@dataclass
class RunMetrics:
    query: str
    batches: int
    input_rows: int
    output_rows: int
    state_rows: int
    state_memory_bytes: int
    state_disk_bytes: int
    late_rows_dropped: int
    watermark: datetime | None
    checkpoint_batch_id: int | None
    duration_seconds: float
    quarantined_rows: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


def _run_available_now(
    spark: SparkSession,
    cfg: TidemarkConfig,
    name: str,
    writer,
    holder: str,
    sink_version=None,
    spec=None,
) -> tuple[list[dict], float]:
    """Run ``writer`` (a DataStreamWriter, or a function making one under the lock) once."""
    checkpoint = cfg.paths.checkpoint(name)
    with checkpoint_lock(checkpoint, holder):
        hold = held(cfg, name)
        if hold is not None:
            raise StreamRunError(f"streaming query {hold.message()}")
        finish_pending(lambda: spark, cfg, name)  # a restore cut short: finished first
        swaps.finish_pending(lambda: spark, cfg, name)  # and a swap of versions
        mend_at_start(cfg, name)  # a torn newest log file set aside, when that is safe
        forget_previous_lineage(cfg, name)
        if spec is not None:  # a job: the rows a killed run did not flush, from its checkpoint
            restore_lost_progress(cfg, spec)
            # keyed state's schema files named where the checkpoint is (a swap made before
            # 2026-12-06 left them naming the shadow's, and the job failed)
            relocate_state_schemas(checkpoint)
        if not isinstance(writer, DataStreamWriter):  # made under the lock (a job's check)
            writer = writer()
        started = time.time()
        done = _available_now(spark, cfg, name, writer, sink_version, spec)
        settle_snapshots(spark, name, checkpoint, started)
        return done


def _seconds(setting: str | None, default: float) -> float:
    """A Spark duration setting ('10s', '500ms', '1min', '2m', a bare number of ms)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h)?\s*", setting or "")
    if not match:
        return default
    scale = {"ms": 0.001, None: 0.001, "s": 1, "m": 60, "min": 60, "h": 3600}[match.group(2)]
    return float(match.group(1)) * scale


def settle_snapshots(spark: SparkSession, name: str, checkpoint, since: float) -> float:
    """Wait, holding the checkpoint's lock, until the state snapshots this run made are uploaded.

    The snapshot a commit makes is uploaded by Spark's state store maintenance, in the
    background. An incremental run's process often ends before that (a Dagster run, `tidemark
    run`), and the snapshot is lost: each later run then replays every changelog since the last
    uploaded snapshot, a cost that grows with the job's history (docs/benchmarks.md, "A new hour's
    cost after a long history"). Most runs made no snapshot and do not wait; one that did waits
    for the next maintenance pass (spark.sql.streaming.stateStore.maintenanceInterval, 10 s in
    tidemark). Returns the seconds waited.
    """
    conf = spark.conf
    min_deltas = int(
        conf.get(
            "spark.sql.streaming.stateStore.minDeltasForSnapshot", str(MIN_DELTAS_FOR_SNAPSHOT)
        )
    )
    interval = _seconds(
        conf.get("spark.sql.streaming.stateStore.maintenanceInterval", None),
        STATE_MAINTENANCE_SECONDS,
    )
    began = time.monotonic()
    deadline = began + 2 * interval + 5
    pending = snapshots_pending(checkpoint, since, min_deltas)
    while pending and time.monotonic() < deadline:
        time.sleep(0.25)
        pending = snapshots_pending(checkpoint, since, min_deltas)
    waited = time.monotonic() - began
    if pending:
        LOG.warning(
            "streaming query %s: %d state snapshot(s) in %s not uploaded after %.0f s; "
            "its next run replays the changelogs since the last uploaded snapshot "
            "(slower to start, nothing lost)",
            name,
            len(pending),
            checkpoint,
            waited,
        )
    elif waited >= 0.25:
        LOG.info("streaming query %s: waited %.1f s for its state snapshot upload", name, waited)
    return waited


def raised_by_rule(exc: BaseException) -> str | None:
    """The message of a ``raise_error`` in the query (a failed expectation), found in the JVM
    exception and its causes; the streaming error that wraps it does not repeat it."""
    text = f"{exc}\n{getattr(exc, '_stackTrace', '') or ''}"
    match = re.search(r"\[USER_RAISED_EXCEPTION\] (.*?)(?: SQLSTATE: \w+|\n|$)", text)
    return match.group(1) if match else None


# what a full disk (or an exhausted quota) looks like in a JVM or Python error
DISK_FULL = ("No space left on device", "Errno 28", "Disk quota exceeded")


def query_failure(exc: BaseException, cfg: TidemarkConfig) -> tuple[str, str]:
    """(why a query failed, what to do): a failed expectation's own message; a full disk
    said plainly, with the space left; else Spark's error without the plan it appends."""
    rule = raised_by_rule(exc)
    if rule:
        return rule, "Fix the cause and run it again"
    text = f"{exc}\n{getattr(exc, '_stackTrace', '') or ''}"
    if any(marker in text for marker in DISK_FULL):
        disk = cfg.work_root  # the data root itself, unless that is on an object store
        what = "this machine's working folder" if cfg.on_store else "the data root"
        try:
            free = f"{shutil.disk_usage(disk).free / 2**20:,.0f} MB free now"
        except OSError:
            free = "free space unknown"
        return (
            f"the disk holding {what} {disk} is full (No space left on device; {free})",
            "Free space there (`tidemark maintain` removes what retention allows, or move "
            "TIDEMARK_DATA_ROOT to a larger disk) and run it again",
        )
    raised = raised_in_python(str(exc))
    if raised:
        return raised, "Fix the cause and run it again"
    return str(exc).split("\n=== Streaming Query ===")[0].strip(), "Fix the cause and run it again"


def _available_now(
    spark: SparkSession,
    cfg: TidemarkConfig,
    name: str,
    writer: DataStreamWriter,
    sink_version=None,
    spec=None,
) -> tuple[list[dict], float]:
    log = progress_log(spark)
    checkpoint = cfg.paths.checkpoint(name)
    started = time.monotonic()
    query = writer.trigger(availableNow=True).start()
    run_id = str(query.runId)
    try:
        query.awaitTermination()
    except Exception as exc:  # noqa: BLE001 - re-raised with the query named
        reason, todo = query_failure(exc, cfg)
        record_job_failure(spark, cfg, name, run_id, reason, spec)
        raise StreamRunError(
            f"streaming query {name} failed (checkpoint {checkpoint}): {reason}. "
            f"{todo}: it resumes from its last committed batch."
        ) from exc
    finally:
        if not log.wait_terminated(run_id):
            LOG.warning(
                "streaming query %s: no termination event within 30 s; recording the "
                "progress received so far",
                name,
            )
        rows = log.take(run_id)
        log.flush(cfg, rows, sink_version, spec)
    return rows, time.monotonic() - started


def last_reading(cfg: TidemarkConfig, name: str) -> dict:
    """The query's latest recorded batch (state, watermark), or {} if it never ran."""
    from streaming_jobs.storage import ops_tables

    rows = ops_tables.read(
        cfg,
        "stream_progress",
        where=f"job = {ops_tables.literal(name)}",
        columns=[
            "batch_id",
            "ts",
            "watermark",
            "state_rows",
            "state_memory_bytes",
            "state_disk_bytes",
        ],
    )
    # a row restored from the checkpoint (`progress.restore_lost_progress`) has no readings
    read = [r for r in rows if r["state_rows"] is not None] or rows
    return max(read, key=lambda r: (r["batch_id"], r["ts"])) if read else {}


def metrics(
    name: str,
    rows: list[dict],
    seconds: float,
    checkpoint_batch: int | None,
    output_rows: int | None = None,
    quarantined: int = 0,
    previous: dict | None = None,
) -> RunMetrics:
    """What a run did (rows in and out, late drops), and where the query stands after it.

    A run with no batch (nothing new arrived) still reports the query's current state and
    watermark, from ``previous`` (its latest recorded batch), never zeros.
    """
    data = [r for r in rows if r["num_input_rows"] is not None]
    last = rows[-1] if rows else (previous or {})
    watermarks = [r["watermark"] for r in rows if r["watermark"] is not None]
    if not watermarks and last.get("watermark") is not None:
        watermarks = [last["watermark"]]
    return RunMetrics(
        query=name,
        batches=len(rows),
        input_rows=sum(r["num_input_rows"] or 0 for r in data),
        output_rows=(
            output_rows if output_rows is not None else sum(r["num_output_rows"] or 0 for r in rows)
        ),
        state_rows=last.get("state_rows") or 0,
        state_memory_bytes=last.get("state_memory_bytes") or 0,
        state_disk_bytes=last.get("state_disk_bytes") or 0,
        late_rows_dropped=sum(r["rows_dropped_by_watermark"] or 0 for r in rows),
        watermark=_naive(max(watermarks)) if watermarks else None,
        checkpoint_batch_id=checkpoint_batch,
        duration_seconds=round(seconds, 3),
        quarantined_rows=quarantined,
    )


def _naive(ts: datetime) -> datetime:
    """UTC wall time (ops tables read back aware datetimes; the listener's are naive UTC)."""
    return ts.astimezone(timezone.utc).replace(tzinfo=None) if ts.tzinfo else ts


@contextmanager
def _full_disk_said_plainly(cfg: TidemarkConfig, name: str):
    """A full disk met outside the query's own run (creating its tables, starting it) is said
    like one met inside it, naming the query, not as a bare JVM error."""
    try:
        yield
    except StreamRunError:
        raise
    except Exception as exc:  # noqa: BLE001 - only a full disk is reworded; the rest re-raised
        reason, todo = query_failure(exc, cfg)
        if not reason.startswith("the disk holding"):
            raise
        raise StreamRunError(
            f"streaming query {name} failed before it started: {reason}. {todo}."
        ) from exc


def run_bronze(
    spark: SparkSession, cfg: TidemarkConfig, stream: str, holder: str = INCREMENTAL
) -> RunMetrics:
    """Ingest everything in ``landing/<stream>`` not yet ingested."""
    name = query_name(stream)
    with _full_disk_said_plainly(cfg, name):
        writer, sink = bronze_writer(spark, cfg, stream_schema(stream))
        rows, seconds = _run_available_now(spark, cfg, name, writer, holder)
    return metrics(
        name,
        rows,
        seconds,
        last_committed_batch(cfg.paths.checkpoint(name)),
        output_rows=sum(good for good, _ in sink.written.values()),
        quarantined=sum(bad for _, bad in sink.written.values()),
        previous=None if rows else last_reading(cfg, name),
    )


def run_job(
    spark: SparkSession, cfg: TidemarkConfig, spec: JobSpec, holder: str = INCREMENTAL
) -> RunMetrics:
    """Process every bronze row the job has not seen yet, then stop."""
    target = cfg.paths.table("gold", spec.name)
    before = []

    def writer() -> DataStreamWriter:
        made = gold_writer(spark, cfg, spec)
        before.append(latest_version(target))  # the writer created the table
        return made

    with _full_disk_said_plainly(cfg, spec.name):
        rows, seconds = _run_available_now(
            spark, cfg, spec.name, writer, holder, sink_version_of(cfg, spec), spec
        )
    return metrics(
        spec.name,
        rows,
        seconds,
        last_committed_batch(cfg.paths.checkpoint(spec.name)),
        output_rows=rows_written(target, before[0])[0],
        previous=None if rows else last_reading(cfg, spec.name),
    )
