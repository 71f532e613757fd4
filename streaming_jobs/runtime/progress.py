"""Stream progress, recorded: a StreamingQueryListener that keeps every progress event.

Spark calls the listener on its listener-bus thread, so the listener only buffers rows;
`ProgressLog.flush` appends them to ``lake/ops/stream_progress`` (`ops_tables`: delta-rs, no
Spark job) from the runner's thread, after each incremental run and periodically in continuous
mode. Each row of a job also gets the version of its output table that the batch committed
(``sink_version``, from the table's log), so readers can see the output exactly as of the
recorded progress.

For Delta sources each row also records the source's version range, normalised to
"last fully read version" before and after the batch; with the batch's watermark this lets
reconciliation find which bronze rows each batch read and which of them were behind the
watermark.
"""

from __future__ import annotations

import json
import re
import threading
from collections import defaultdict
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Callable

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQueryListener

from streaming_jobs.storage import ops_tables
from streaming_jobs.storage.expectations import from_progress, record
from streaming_jobs.core import locations
from streaming_jobs.core.config import TidemarkConfig


def _ts(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).replace(tzinfo=None)


def delta_done_version(offset) -> int | None:
    """The last bronze version fully read at a Delta source offset (-1 before any).

    A Delta offset is (reservoirVersion, index): index < 0 means nothing of that version has
    been read yet, otherwise files up to ``index`` were. tidemark reads Delta sources without
    an admission limit that could cut a version in two, so a non-negative index means the whole
    version was read (the initial snapshot included).
    """
    if offset is None:
        return -1
    if isinstance(offset, str):
        try:
            offset = json.loads(offset)
        except ValueError:
            return None
    if not isinstance(offset, dict) or "reservoirVersion" not in offset:
        return None
    version, index = int(offset["reservoirVersion"]), int(offset.get("index", -1))
    return version - 1 if index < 0 else version


_DELTA_SOURCE = re.compile(r"DeltaSource\[(.+)\]")


def source_versions(sources: list[dict]) -> list[dict]:
    """Per Delta source of a batch: its table's name and the bronze versions the batch read."""
    out = []
    for source in sources:
        match = _DELTA_SOURCE.match(source.get("description") or "")
        if match:
            out.append(
                {
                    "source_table": match.group(1).rstrip("/").rsplit("/", 1)[-1],
                    "version_from": delta_done_version(source.get("startOffset")),
                    "version_to": delta_done_version(source.get("endOffset")),
                }
            )
    return out


def kafka_lag(sources: list[dict]) -> int | None:
    """Records the batch left unread in its Kafka sources (each partition's latest offset when
    the batch was planned, minus where it ended); None without a Kafka source."""
    lag = None
    for source in sources:
        if not (source.get("description") or "").startswith("Kafka"):
            continue
        try:  # JSON text, or already parsed
            latest, end = (
                json.loads(v) if isinstance(v, str) else (v or {})
                for v in (source.get("latestOffset"), source.get("endOffset"))
            )
        except ValueError:
            continue
        lag = (lag or 0) + sum(
            max(int(offset) - int(end.get(topic, {}).get(p, 0)), 0)
            for topic, parts in latest.items()
            for p, offset in parts.items()
        )
    return lag


def progress_row(job: str, progress: dict) -> dict:
    ops = progress.get("stateOperators") or []
    operators = [
        {
            "operator": op.get("operatorName"),
            "rows": op.get("numRowsTotal"),
            "rows_updated": op.get("numRowsUpdated"),
            "rows_removed": op.get("numRowsRemoved"),
            "memory_bytes": op.get("memoryUsedBytes"),
            "dropped_by_watermark": op.get("numRowsDroppedByWatermark"),
            "commit_ms": op.get("commitTimeMs"),
            "partitions": op.get("numShufflePartitions"),
            "custom": {k: int(v) for k, v in (op.get("customMetrics") or {}).items()},
        }
        for op in ops
    ]
    sources = progress.get("sources") or [{}]
    source = sources[0]
    sink_rows = (progress.get("sink") or {}).get("numOutputRows")
    return {
        "job": job,
        "query_id": progress.get("id"),
        "run_id": progress.get("runId"),
        "batch_id": progress.get("batchId"),
        "ts": _ts(progress.get("timestamp")),
        "batch_duration_ms": progress.get("batchDuration"),
        "num_input_rows": progress.get("numInputRows"),
        "input_rows_per_second": float(progress.get("inputRowsPerSecond") or 0.0),
        "processed_rows_per_second": float(progress.get("processedRowsPerSecond") or 0.0),
        "num_output_rows": sink_rows if sink_rows is not None and sink_rows >= 0 else None,
        "watermark": _ts((progress.get("eventTime") or {}).get("watermark")),
        "state_rows": sum(o["rows"] or 0 for o in operators),
        "state_memory_bytes": sum(o["memory_bytes"] or 0 for o in operators),
        "state_disk_bytes": sum(o["custom"].get("rocksdbSstFileSize", 0) for o in operators),
        "rows_dropped_by_watermark": sum(o["dropped_by_watermark"] or 0 for o in operators),
        "state_commit_ms": sum(o["commit_ms"] or 0 for o in operators),
        "durations_ms": {k: int(v) for k, v in (progress.get("durationMs") or {}).items()},
        "state_operators": operators,
        "source_version_from": delta_done_version(source.get("startOffset")),
        "source_version_to": delta_done_version(source.get("endOffset")),
        "source_versions": source_versions(sources),
        "source_lag_rows": kafka_lag(sources),
        "progress_json": json.dumps(progress, sort_keys=True),
    }


class _SparkEvents:
    """Spark's listener interface, called from the JVM, handing `ProgressLog` only what it
    reads: the progress as Spark's JSON, the run id, the exception.

    PySpark's own listener converts each progress event into Python objects first: dozens of
    calls into the JVM, and a class looked up on the whole class path for each observed metric.
    That took 112.8 ms per progress event against 0.9 ms for the JSON alone (median, 2026-12-02,
    `tools/benchmarks/listener_cost.py`): CPU on every batch of every query, and events waiting
    in the listener's queue."""

    def __init__(self, log: ProgressLog) -> None:
        self.log = log

    def onQueryStarted(self, jevent) -> None:  # noqa: N802 - Spark's names
        self.log.onQueryStarted(SimpleNamespace(runId=jevent.runId().toString()))

    def onQueryProgress(self, jevent) -> None:  # noqa: N802
        json_text = jevent.progress().json()
        self.log.onQueryProgress(SimpleNamespace(progress=SimpleNamespace(json=json_text)))

    def onQueryIdle(self, jevent) -> None:  # noqa: N802
        pass

    def onQueryTerminated(self, jevent) -> None:  # noqa: N802
        exception = jevent.exception()
        self.log.onQueryTerminated(
            SimpleNamespace(
                runId=jevent.runId().toString(),
                exception=exception.get() if exception.isDefined() else None,
            )
        )

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


class ProgressLog(StreamingQueryListener):
    """Buffers progress rows per query until they are flushed to the ops table."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._rows: dict[str, list[dict]] = defaultdict(list)
        self._terminated: dict[str, str | None] = {}
        self._reported: dict[str, int] = {}  # per run id still running: batches reported

    @property
    def _jlistener(self):
        """What `spark.streams.addListener` registers: Spark's wrapper around `_SparkEvents`
        (instead of PySpark's converting one)."""
        from pyspark import SparkContext

        if not hasattr(self, "_jlistenerobj"):
            self._jlistenerobj = SparkContext._jvm.PythonStreamingQueryListenerWrapper(
                _SparkEvents(self)
            )
        return self._jlistenerobj

    # Spark's callbacks -------------------------------------------------------------
    def onQueryStarted(self, event) -> None:  # noqa: N802 - Spark's name
        with self._lock:
            self._terminated.pop(str(event.runId), None)

    def onQueryProgress(self, event) -> None:  # noqa: N802
        progress = json.loads(event.progress.json)
        name = progress.get("name") or "unnamed"
        with self._lock:
            run_id = str(progress.get("runId"))
            self._rows[run_id].append(progress_row(name, progress))
            self._reported[run_id] = self._reported.get(run_id, 0) + 1
            self._lock.notify_all()

    def onQueryIdle(self, event) -> None:  # noqa: N802
        pass

    def onQueryTerminated(self, event) -> None:  # noqa: N802
        with self._lock:
            self._terminated[str(event.runId)] = event.exception
            self._reported.pop(str(event.runId), None)
            self._lock.notify_all()

    # tidemark's side ---------------------------------------------------------------
    def wait_terminated(self, run_id: str, timeout: float = 30.0) -> bool:
        """Wait until the listener has seen the query end (then all its progress is buffered).

        Returns False on timeout instead of raising: the caller is usually already handling
        the query's own failure, which must not be hidden by this one.
        """
        with self._lock:
            return self._lock.wait_for(lambda: run_id in self._terminated, timeout)

    def batches_reported(self, run_id: str) -> int:
        """How many batches of a running query have reported so far."""
        with self._lock:
            return self._reported.get(run_id, 0)

    def wait_batch_reported(self, run_id: str, after: int, timeout: float) -> bool:
        """Wait until the query has reported more than ``after`` batches: the batch in flight
        has finished (its checkpoint commit included). False on timeout."""
        with self._lock:
            return self._lock.wait_for(lambda: self._reported.get(run_id, 0) > after, timeout)

    def take(self, run_id: str) -> list[dict]:
        with self._lock:
            return self._rows.pop(run_id, [])

    def flush(
        self,
        cfg: TidemarkConfig,
        rows: list[dict],
        sink_version: Callable[[dict], int | None] | None = None,
        spec=None,
    ) -> None:
        """Append ``rows`` to ``ops/stream_progress``, each with its ``sink_version``; for the
        job ``spec`` (append mode), its expectations' counts to ``ops/expectations``."""
        if sink_version:
            for row in rows:
                if row.get("sink_version") is None:
                    row["sink_version"] = sink_version(row)
        if spec is not None and rows:
            version = _version(spec)
            for row in rows:
                row.setdefault("job_version", version)
        ops_tables.append(cfg, "stream_progress", rows)
        if spec is not None and spec.expectations and spec.output_mode == "append":
            record(cfg, from_progress(rows, spec.expectations))


_LOGS: dict[int, ProgressLog] = {}
_VERSIONS: dict[int, tuple[object, str]] = {}


def _version(spec) -> str:
    """The job's version (computed once per spec object: a continuous run flushes often)."""
    from streaming_jobs.core.versions import version_of
    from streaming_jobs.runtime.changes import current_parts

    known = _VERSIONS.get(id(spec))
    if known is None or known[0] is not spec:
        known = (spec, version_of(current_parts(spec)))
        _VERSIONS[id(spec)] = known
    return known[1]


def progress_log(spark: SparkSession) -> ProgressLog:
    """The one listener of this SparkSession, registered on first use."""
    key = id(spark)
    if key not in _LOGS:
        log = ProgressLog()
        spark.streams.addListener(log)
        _LOGS[key] = log
    return _LOGS[key]


def forget_previous_lineage(cfg: TidemarkConfig, query: str) -> int:
    """Before a query starts on a checkpoint that holds no batch yet (new, or deleted to
    rebuild the job): remove the query's rows of ``ops/stream_progress`` and
    ``ops/stream_failures``. They describe batches of a checkpoint and an output table that are
    gone; kept, they would add their input counts and version ranges to the new ones.

    Call it holding the checkpoint's lock. A restored checkpoint holds batches, so a restore's
    rows (its lineage up to the savepoint) are never touched. Returns the rows removed.
    """
    from streaming_jobs.core.checkpoints import last_planned_batch

    if last_planned_batch(cfg.paths.checkpoint(query)) is not None:
        return 0
    return forget_lineage(cfg, query)


RESTORED = "restored from the checkpoint"  # progress_json of a row `restore_lost_progress` made


def unreported_batches(cfg: TidemarkConfig, query: str, checkpoint) -> tuple[str | None, list]:
    """The checkpoint's query id, and its committed batches (``commits/``) with no row of
    ``query`` in ``ops/stream_progress`` under that id (batches retention folded aside)."""
    from streaming_jobs.core.checkpoints import committed_batches, query_id

    qid = query_id(checkpoint)
    committed = committed_batches(checkpoint)
    if qid is None or not committed:
        return qid, []
    recorded = ops_tables.read(
        cfg,
        "stream_progress",
        where=f"job = {ops_tables.literal(query)} and query_id = {ops_tables.literal(qid)}",
        columns=["batch_id", "rolled_up_batches"],
    )
    have = {r["batch_id"] for r in recorded}
    folded = max((r["batch_id"] for r in recorded if r["rolled_up_batches"]), default=-1)
    return qid, [b for b in committed if b not in have and b > folded]


def restore_lost_progress(cfg: TidemarkConfig, spec, place=None) -> list[int]:
    """Write a progress row for each committed batch of the job that has none; the batch ids.

    A process killed after a batch committed and before its rows were flushed (a continuous run
    flushes every few seconds, an incremental run at its end) leaves those batches out of
    ``ops/stream_progress``, and reconciliation then cannot say which batch read their bronze
    rows nor which of them were late: they showed as unexplained. The checkpoint still knows
    each batch: the bronze versions it read (``offsets/N-1`` to ``offsets/N``) and the watermark
    it ran with (``offsets/N``'s metadata). The row built from them has no counts: its input
    count is null, so reconciliation takes its late rows as those of a batch whose report was
    lost (as for a batch replayed after a crash). Call it holding the checkpoint's lock, before
    the query starts. ``place``: the job's own unless given (`gold.Place`).
    """
    from streaming_jobs.core.checkpoints import batch_metadata, batch_offsets
    from streaming_jobs.runtime.gold import Place, sink_version_of

    place = place or Place.live(cfg, spec)
    qid, lost = unreported_batches(cfg, place.name, place.checkpoint)
    if not lost:
        return []
    tables = {}
    for source in spec.sources:
        bronze = cfg.paths.table("bronze", source)
        if locations.is_delta_table(bronze):
            tables[locations.delta_table(bronze).metadata().id] = source
    rows = []
    for batch in lost:
        meta, ends = batch_metadata(place.checkpoint, batch), batch_offsets(place.checkpoint, batch)
        starts = batch_offsets(place.checkpoint, batch - 1) if batch > 0 else []
        if meta is None or ends is None or starts is None:
            continue  # its offsets are gone (Spark keeps the newest): nothing to rebuild from
        reads = [
            {
                "source_table": tables[end["reservoirId"]],
                "version_from": delta_done_version(starts[i] if i < len(starts) else None),
                "version_to": delta_done_version(end),
            }
            for i, end in enumerate(ends)
            if end.get("reservoirId") in tables
        ]
        rows.append(
            {
                "job": place.name,
                "query_id": qid,
                "batch_id": batch,
                "ts": _epoch_ms(meta.get("batchTimestampMs")),
                "watermark": _epoch_ms(meta.get("batchWatermarkMs")),
                "source_version_from": reads[0]["version_from"] if reads else None,
                "source_version_to": reads[0]["version_to"] if reads else None,
                "source_versions": reads,
                "progress_json": json.dumps({"batchId": batch, "note": RESTORED}),
            }
        )
    if rows:
        resolve = sink_version_of(cfg, spec, place.target)
        version = _version(spec)
        for row in rows:
            row["sink_version"] = resolve(row)
            row["job_version"] = version
        ops_tables.append(cfg, "stream_progress", rows)
    return [r["batch_id"] for r in rows]


def _epoch_ms(value) -> datetime | None:
    """Spark's epoch milliseconds as naive UTC, as `progress_row` records times."""
    if value is None:
        return None
    return datetime.fromtimestamp(int(value) / 1000.0, timezone.utc).replace(tzinfo=None)


def forget_lineage(cfg: TidemarkConfig, query: str) -> int:
    """Remove every ops row recorded under ``query`` (`ops_tables.QUERY_ROWS`); the count."""
    removed = 0
    for table in ops_tables.QUERY_ROWS:
        with ops_tables.locked(cfg, table) as handle:
            predicate = f"job = {ops_tables.literal(query)}"
            stale = handle.read(where=predicate, columns=["job"])
            if stale:
                handle.delete(predicate)
                removed += len(stale)
    return removed
