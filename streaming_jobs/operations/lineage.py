"""Folding old progress rows: ``ops/stream_progress`` stays small however long a job runs.

Every micro-batch of every query appends a row to ``ops/stream_progress``: at a 15 s trigger,
thousands a day per query. Most readers want the recent ones (sensors, the overview, a run's
metadata). Reconciliation's lateness replay is the exception: it explains each late event by
the batch that read its bronze row (the batch's bronze version range) and the watermark that
batch dropped rows behind (the previous batch's). Delete those rows and the explanations go.

So retention folds instead of deleting. For each query lineage (job, query id), the batches
older than ``TIDEMARK_OPS_RETENTION_DAYS`` become one **rollup row** (``rolled_up_batches`` set):
their input, output and dropped-late rows summed, the version range they read from each
source, and the last one's batch id, watermark, state and gold version (so the next batch's
late threshold, the recorded position and the gold pin are unchanged). The one thing a rollup
cannot keep, each batch's own late threshold, is replaced by its outcome: the bronze rows the
folded batches dropped as late, by Delta row id, in ``ops/stream_late_rows`` (each marked
``report_lost`` when its batch's own report counted nothing, see `report_lost`). The replay takes
a folded row's lateness from there (``macros/lateness.sql``), so a full reconciliation after a
fold classifies every row exactly as before it (``tests/orchestration/test_recon.py``).

What is never folded: the lineage's newest batch; a batch later than the oldest savepoint of
the job (a restore deletes the batches after its savepoint, which must stay whole rows); a
batch of a query without a rollup-able position (no ``source_versions``: bronze ingestion
queries are folded too, with no ledger, as nothing reads their batches' lateness).

Crash safety: the ledger rows are written first (after removing any left by a fold that did not
finish), then the batches are replaced by their rollup in one Delta commit, under the progress
table's lock and only if the batches are still the ones planned. A kill between the two leaves
ledger rows that no rollup points at yet (ignored); the next maintenance redoes the fold.

Limit: a fold's late rows pass through the maintenance process (Spark finds them, delta-rs
appends them under the table's lock). With a daily fold that is a day's late events: fine at
tens of events per second, about 1.7 M rows at 1,000 events/s with 2 % late. Past that, write
them from Spark instead.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timezone

from streaming_jobs.core import locations
from streaming_jobs.storage.lake import spark_path
from streaming_jobs.storage import ops_tables
from streaming_jobs.core.config import TidemarkConfig

LOG = logging.getLogger("tidemark.lineage")

PROGRESS = "stream_progress"
LEDGER = "stream_late_rows"
# summed over the folded batches; every other column comes from the last folded batch
SUMMED = ("batch_duration_ms", "num_input_rows", "num_output_rows", "rows_dropped_by_watermark")


@dataclass
class Fold:
    """One lineage's batches to fold, planned from its progress rows (see `plan`)."""

    job: str
    query_id: str
    upto_batch: int  # every batch of the lineage up to this one goes into the rollup
    previous: dict | None  # the lineage's rollup row so far, if any
    batches: list[dict] = field(default_factory=list)  # the raw rows folded, by batch id
    thresholds: dict[int, datetime | None] = field(default_factory=dict)  # batch -> late threshold
    reports: int = 0  # raw rows replaced (a batch replayed after a crash reports twice)

    def rollup(self) -> dict:
        """The row that replaces the folded ones (and the previous rollup)."""
        parts = ([self.previous] if self.previous else []) + self.batches
        last = self.batches[-1]
        row = {name: last.get(name) for name in ops_tables.arrow_schema(PROGRESS).names}
        for name in SUMMED:
            # a figure no folded batch reported (a foreachBatch sink's output rows) stays
            # unknown: it is not a zero
            readings = [p[name] for p in parts if p.get(name) is not None]
            row[name] = sum(readings) if readings else None
        ranges: dict[str, list] = {}
        for part in parts:
            for read in part.get("source_versions") or []:
                low, high = ranges.setdefault(read["source_table"], [None, None])
                ranges[read["source_table"]] = [
                    _least(low, read.get("version_from")),
                    _most(high, read.get("version_to")),
                ]
        row["source_versions"] = [
            {"source_table": name, "version_from": low, "version_to": high}
            for name, (low, high) in sorted(ranges.items())
        ] or None
        row["source_version_from"] = _least(*(p.get("source_version_from") for p in parts))
        row["source_version_to"] = _most(*(p.get("source_version_to") for p in parts))
        row.update(
            state_operators=None,
            progress_json=None,
            durations_ms=None,
            input_rows_per_second=None,
            processed_rows_per_second=None,
            rolled_up_batches=len(self.batches)
            + ((self.previous or {}).get("rolled_up_batches") or 0),
        )
        return row

    @property
    def predicate(self) -> str:
        """The rows the rollup replaces: the lineage's batches up to ``upto_batch``."""
        return (
            f"job = {ops_tables.literal(self.job)} and "
            f"query_id = {ops_tables.literal(self.query_id)} and "
            f"batch_id <= {self.upto_batch}"
        )


def _least(*values):
    present = [v for v in values if v is not None]
    return min(present) if present else None


def _most(*values):
    present = [v for v in values if v is not None]
    return max(present) if present else None


def plan(rows: list[dict], cutoff: datetime, savepoint_batches: dict[str, int]) -> list[Fold]:
    """The folds to make (a pure function of the progress rows).

    ``cutoff``: batches recorded before it may be folded; ``savepoint_batches``: per job, the
    batch of its oldest savepoint (no later batch is folded). Within a lineage, the batches
    folded are the longest run from its start (or its rollup) that are all old enough; the
    newest batch always stays a row of its own. Only a job's current lineage (the query id of
    its newest row) is folded. Late thresholds are each batch's previous
    batch's watermark, as ``stg_stream_progress`` computes them (the latest report of a batch
    wins).
    """
    # per job, its current lineage only: the query id of its newest row (older lineages are
    # removed when a checkpoint starts over, and a restore moves its rows to the new id)
    newest: dict[str, dict] = {}
    for row in rows:
        if row["job"] not in newest or (row["ts"], row["batch_id"]) > (
            newest[row["job"]]["ts"],
            newest[row["job"]]["batch_id"],
        ):
            newest[row["job"]] = row
    lineages: dict[tuple[str, str], dict[int, dict]] = {}
    counts: dict[tuple[str, str, int], int] = {}
    for row in rows:
        if row["query_id"] != newest[row["job"]]["query_id"]:
            continue
        key = (row["job"], row["query_id"])
        counts[(*key, row["batch_id"])] = counts.get((*key, row["batch_id"]), 0) + 1
        batches = lineages.setdefault(key, {})
        held = batches.get(row["batch_id"])
        # a rollup row outranks a raw report of its own last batch; else the latest report
        if held is None or (
            not held.get("rolled_up_batches")
            and (row.get("rolled_up_batches") or row["ts"] > held["ts"])
        ):
            batches[row["batch_id"]] = row
    folds = []
    for (job, query_id), batches in sorted(lineages.items()):
        ordered = [batches[b] for b in sorted(batches)]
        rolled = [r for r in ordered if r.get("rolled_up_batches")]
        previous = rolled[-1] if rolled else None
        start = ordered.index(previous) + 1 if previous else 0
        limit = savepoint_batches.get(job)
        chosen: list[dict] = []
        for row in ordered[start:-1]:  # never the newest batch
            if row["ts"] >= cutoff or (limit is not None and row["batch_id"] > limit):
                break
            chosen.append(row)
        if not chosen:
            continue
        fold = Fold(job, query_id, chosen[-1]["batch_id"], previous, chosen)
        for position, row in enumerate(ordered[start : start + len(chosen)], start=start):
            fold.thresholds[row["batch_id"]] = (
                ordered[position - 1]["watermark"] if position > 0 else None
            )
        fold.reports = sum(counts[(job, query_id, r["batch_id"])] for r in chosen) + (
            counts[(job, query_id, previous["batch_id"])] if previous else 0
        )
        folds.append(fold)
    return folds


def report_lost(batch: dict) -> bool:
    """Whether a batch's report counted none of its input although it read some: a batch that
    re-ran after a stop or a crash whose write had already committed is skipped by the Delta
    sink (exactly once), so Spark reports 0 rows read and 0 dropped for it. Any bronze row in
    its version range was read, and maybe dropped, by the run that was cut short. The replay
    counts its late rows apart (``late_events_report_lost``)."""
    return (batch.get("num_input_rows") or 0) == 0


def _late_rows(spark, cfg: TidemarkConfig, fold: Fold, now: datetime) -> list[dict]:
    """The bronze rows the folded batches dropped as late (event time at or behind the batch's
    late threshold), read with Spark: every source the job reads, only the versions the
    folded batches read (and, by file statistics, only files at or after their first
    ingestion batch)."""
    from pyspark.sql import functions as F

    from streaming_jobs.core.delta_log import ingest_batch_floor
    from streaming_jobs.storage.registry import catalogue, stream_schema

    # a job that reads only some rows of its source (JobSpec.reads) drops only those as late
    spec = catalogue(analysed=False).jobs.get(fold.job)
    out = []
    for source in sorted(
        {r["source_table"] for b in fold.batches for r in (b.get("source_versions") or [])}
    ):
        spans = [
            (
                b["batch_id"],
                r["version_from"],
                r["version_to"],
                fold.thresholds.get(b["batch_id"]),
                report_lost(b),
            )
            for b in fold.batches
            for r in (b.get("source_versions") or [])
            if r["source_table"] == source and r.get("version_to") is not None
        ]
        spans = [s for s in spans if s[3] is not None]  # no threshold yet: nothing was late
        if not spans:
            continue
        low = min(s[1] if s[1] is not None else -1 for s in spans)
        high = max(s[2] for s in spans)
        table = cfg.paths.table("bronze", source)
        event_time = stream_schema(source).event_time
        reads = spec.reads if spec is not None and source == spec.source else None
        rows = (
            spark.read.format("delta")
            .load(spark_path(table))
            .select(
                F.col(event_time).alias("event_time"),
                F.col("_metadata.row_commit_version").alias("bronze_version"),
                F.col("_metadata.row_id").alias("row_id"),
                F.col("_ingest_batch_id"),
                F.expr(reads or "true").alias("job_reads"),
            )
            .where("job_reads")
        )
        floor = ingest_batch_floor(table, low)
        if floor is not None:
            rows = rows.where(F.col("_ingest_batch_id") >= floor)
        rows = rows.where((F.col("bronze_version") > low) & (F.col("bronze_version") <= high))
        batches = spark.createDataFrame(
            [(b, f if f is not None else -1, t, th, lost) for b, f, t, th, lost in spans],
            "batch_id long, version_from long, version_to long, late_threshold timestamp, "
            "report_lost boolean",
        )
        late = (
            rows.join(
                F.broadcast(batches),
                (rows.bronze_version > batches.version_from)
                & (rows.bronze_version <= batches.version_to),
            )
            .where(F.col("event_time") <= F.col("late_threshold"))
            .select(
                "batch_id",
                "bronze_version",
                "row_id",
                "event_time",
                "late_threshold",
                "report_lost",
            )
        )
        out += [
            {"job": fold.job, "source_table": source, **r.asDict(), "recorded_at": now}
            for r in late.collect()
        ]
    return out


def _savepoint_batches(cfg: TidemarkConfig) -> dict[str, int]:
    from streaming_jobs.operations.savepoints import savepoints

    out = {}
    folder = cfg.paths.savepoints
    for job in locations.names(folder):
        if not locations.is_dir(folder / job):
            continue
        taken = savepoints(cfg, job)
        if taken:
            out[job] = min(s.batch_id for s in taken)
    return out


def fold(
    spark, cfg: TidemarkConfig, cutoff: datetime, now: datetime | None = None
) -> tuple[int, int, int]:
    """Fold every lineage's batches older than ``cutoff`` (see the module doc).

    Returns (raw rows replaced, rollup rows written, ledger rows written).
    """
    now = now or datetime.now(timezone.utc)
    if not ops_tables.exists(cfg, PROGRESS):
        return 0, 0, 0
    columns = [
        "job",
        "query_id",
        "batch_id",
        "ts",
        "watermark",
        "rolled_up_batches",
        "source_versions",
        "source_version_from",
        "source_version_to",
        "run_id",
        *SUMMED,
        "state_rows",
        "state_memory_bytes",
        "state_disk_bytes",
        "sink_version",
        "source_lag_rows",
        "state_commit_ms",
    ]
    rows = ops_tables.read(cfg, PROGRESS, columns=columns)
    replaced = written = ledgered = 0
    for planned in plan(rows, cutoff, _savepoint_batches(cfg)):
        late = _late_rows(spark, cfg, planned, now)
        job = ops_tables.literal(planned.job)
        floor = planned.previous["batch_id"] if planned.previous else -1
        with ops_tables.locked(cfg, LEDGER) as ledger:
            # rows left by a fold of this job that did not finish, then this fold's
            unfinished = f"job = {job} and batch_id > {floor}"
            if ledger.read(where=unfinished, columns=["job"]):
                ledger.delete(unfinished)
            ledger.append(late)
        with ops_tables.locked(cfg, PROGRESS) as progress:
            # only if the rows are still the ones planned (a rebuild or a restore may have
            # changed them meanwhile): else the next maintenance plans again
            now_there = progress.read(where=planned.predicate, columns=["batch_id"])
            if len(now_there) != planned.reports:
                LOG.info(
                    "%s: its progress changed while folding; left for the next run", planned.job
                )
                continue
            progress.replace([planned.rollup()], planned.predicate)
        replaced += planned.reports
        written += 1
        ledgered += len(late)
    return replaced, written, ledgered
