"""The row a held job's batch fails on, found before the hold is recorded.

A job's batch that fails again and again usually fails on one row meeting the job's code: a
cast that overflows, a date that does not parse, a Python function that raises. Spark's error
names the operator, sometimes the value, rarely the row. So when a failure is about to hold a
job (`failures.would_hold`), tidemark runs the job's ``build`` once more as a batch query over
the bronze rows that batch reads (picked by their commit version, from the checkpoint's
offsets), and if that fails too, halves the rows until one row fails alone. The hold's alert
and refusal then name that row (its stream, bronze version and columns) and its error.

What it cannot find, it says: a batch that reads no new row (the row is in the job's state), a
failure that does not happen outside the stream (the state, the sink, the environment), or one
that needs rows together. The search is bounded (`LOCATE_ROWS`, `LOCATE_SECONDS`) and never
raises: the query's own error is the one reported.
"""

from __future__ import annotations

import json
import logging
import re
import time

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from streaming_jobs.core import locations
from streaming_jobs.core.checkpoints import delta_reads
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.spec import JobSpec
from streaming_jobs.storage.failures import record_failure, would_hold
from streaming_jobs.storage.lake import spark_path

LOG = logging.getLogger("tidemark.locate")

# the most rows a search reads (the batch's rows are pinned in executor memory)
LOCATE_ROWS = 2_000_000
# the time a search may take; past it, the smallest failing set found so far is named
LOCATE_SECONDS = 120.0
# the longest row shown, in characters
SHOWN = 1000
ROW, VERSION = "_tidemark_locate_row", "_bronze_version"


def record_job_failure(
    spark: SparkSession,
    cfg: TidemarkConfig,
    name: str,
    run_id: str,
    error: str,
    spec: JobSpec | None = None,
) -> None:
    """`record_failure` for query ``name`` (a job when ``spec`` is given); when this failure
    holds the job, with what `locate` finds. Never raises (see `record_failure`)."""
    located = None
    if spec is not None:
        try:
            batch = would_hold(cfg, spec.name)
            if batch is not None:
                located = locate(spark, cfg, spec, batch)
        except Exception as exc:  # noqa: BLE001 - the query's own error is the one reported
            LOG.warning("job %s: could not search its failing batch: %s", name, exc)
            located = f"tidemark could not search the failing batch for its row ({exc})"[:600]
    record_failure(cfg, name, run_id, error, located=located)


def raised_in_python(text: str) -> str | None:
    """The exception a foreachBatch function raised (a failed expectation, a refused write),
    from the Python traceback Spark wraps in its own error: its last ``Type: message`` line.
    tidemark's own exceptions say what to do, and are given by their message alone."""
    marker = "Traceback (most recent call last):"
    if marker not in text:
        return None
    # the traceback's frames are indented; its first line at the margin is the exception
    after = text[text.rindex(marker) + len(marker) :]
    found = re.search(r"^((?:[A-Za-z_]\w*\.)*)([A-Z]\w*): (.+)$", after, re.M)
    if not found:
        return None
    module, name, message = found.groups()
    return message.strip() if module.startswith("streaming_jobs.") else f"{name}: {message}"


def _said(exc: BaseException) -> str:
    text = str(exc)
    return (raised_in_python(text) or text.split("\n")[0]).strip()[:400]


def _fails(spec: JobSpec, frames: list[DataFrame]) -> str | None:
    """The error the job's build gives on ``frames`` as a batch query, or None."""
    try:
        spec.apply(*frames).write.format("noop").mode("overwrite").save()
    except Exception as exc:  # noqa: BLE001 - any error is the answer
        return _said(exc)
    return None


class _Rows:
    """One source's rows of the batch, pinned with a row number, and the range searched."""

    def __init__(self, source: str, frame: DataFrame) -> None:
        self.source = source
        self.pinned = (
            frame.withColumn(VERSION, F.col("_metadata.row_commit_version"))
            .withColumn(ROW, F.monotonically_increasing_id())
            .localCheckpoint()
        )
        self.ids = [r[0] for r in self.pinned.select(ROW).orderBy(ROW).collect()]
        self.lo, self.hi = 0, len(self.ids)

    def frame(self, lo: int | None = None, hi: int | None = None) -> DataFrame:
        lo, hi = self.lo if lo is None else lo, self.hi if hi is None else hi
        return self._rows(lo, hi).drop(ROW, VERSION)

    def _rows(self, lo: int, hi: int) -> DataFrame:
        if hi <= lo:
            return self.pinned.where(F.lit(False))
        return self.pinned.where((F.col(ROW) >= self.ids[lo]) & (F.col(ROW) <= self.ids[hi - 1]))

    def shown(self) -> list[str]:
        """The first rows of the range, each as JSON after its bronze version."""
        rows = self._rows(self.lo, self.hi).drop(ROW).limit(3).collect()
        return [
            f"version {r[VERSION]} {json.dumps(_plain(r.asDict(recursive=True)), default=str)[:SHOWN]}"
            for r in rows
        ]


def _plain(row: dict) -> dict:
    return {k: v for k, v in row.items() if k != VERSION}


def locate(spark: SparkSession, cfg: TidemarkConfig, spec: JobSpec, batch: int) -> str:
    """The row ``spec``'s ``batch`` fails on, or why none was found, as a sentence."""
    ids = {}
    for source in spec.sources:
        table = cfg.paths.table("bronze", source)
        ids[locations.delta_table(table).metadata().id] = source
    versions = {ids[t]: v for t, v in delta_reads(cfg.paths.checkpoint(spec.name), batch).items()}
    read = {s: v for s, v in versions.items() if s in ids.values() and v[1] >= v[0]}
    if not read:
        return (
            f"Batch {batch} reads no new bronze row: it fails on what the job's state holds "
            "from earlier batches, so no row of it can be named"
        )
    started = time.monotonic()
    rows = []
    for source in spec.sources:
        frame = spark.read.format("delta").load(spark_path(cfg.paths.table("bronze", source)))
        first, last = read.get(source, (0, -1))
        version = F.col("_metadata.row_commit_version")
        rows.append(_Rows(source, frame.where((version >= first) & (version <= last))))
    total = sum(len(r.ids) for r in rows)
    if total > LOCATE_ROWS:
        return f"Batch {batch} reads {total:,} bronze rows, too many to search for the failing one"
    whole = _fails(spec, [r.frame() for r in rows])
    if whole is None:
        return (
            f"Run outside the stream on the {total:,} bronze rows batch {batch} reads, the job "
            "does not fail: the cause is in its state from earlier batches, its sink or its "
            "environment, not in one of these rows"
        )
    error = whole
    for searched in rows:
        while searched.hi - searched.lo > 1 and time.monotonic() - started < LOCATE_SECONDS:
            mid = (searched.lo + searched.hi) // 2
            for lo, hi in ((searched.lo, mid), (mid, searched.hi)):
                said = _fails(
                    spec, [searched.frame(lo, hi) if r is searched else r.frame() for r in rows]
                )
                if said is not None:
                    searched.lo, searched.hi, error = lo, hi, said
                    break
            else:
                break  # each half passes alone: the failure needs rows of both
    left = [r for r in rows if r.hi > r.lo]
    count = sum(r.hi - r.lo for r in left)
    found = "; ".join(f"bronze/{r.source}: {', '.join(r.shown())}" for r in left)
    if count == 1:
        return (
            f"Run outside the stream on the {total:,} bronze rows batch {batch} reads, the job "
            f"fails on this row alone: {found} ({error})"
        )
    return (
        f"Run outside the stream on the {total:,} bronze rows batch {batch} reads, the job "
        f"fails on {count} of them together and on no smaller part tried"
        + (" (the search ran out of time)" if time.monotonic() - started >= LOCATE_SECONDS else "")
        + f"; the first: {found} ({error})"
    )
