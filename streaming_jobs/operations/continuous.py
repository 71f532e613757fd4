"""Continuous mode: a group of queries in one SparkSession, on a processing-time trigger.

`run_continuous` owns every checkpoint of the group for its whole life (a second run on any of
them is refused, see `locks`), starts the queries and runs until ``should_stop()`` says so, a
query fails, or ``max_seconds`` pass. Every ``flush_seconds`` it

- appends the queries' progress to ``ops/stream_progress`` (so sensors see fresh state sizes
  and reconciliation sees the committed position), and
- calls ``on_flush`` with a `QueryReport` per query: what it did since the previous report and
  where it stands (state, watermark, caught up or not), which Dagster shows live.

Savepoints: the run answers the savepoint requests of the jobs it hosts (`savepoints.request`),
within about a second: it stops that one query when no micro-batch is in flight, copies its
checkpoint, restarts it and answers. The other queries go on meanwhile.

A job whose new version its checkpoint's state cannot take (`changes.UnsafeChange`) is left
out, at the start or after a swap (a rollback to a version the code is not), and the run keeps
hosting it: it holds its checkpoint, answers its savepoint and swap requests (a `tidemark
rebuild` of the new version is swapped in by this run, which then starts it; a `tidemark
accept` is recorded by it), and starts it as soon as its code changes to a version that passes
the check (`tidemark code JOB --put-back` after a rollback), every ``REFUSED_POLL_SECONDS``. A
job whose start fails after such a change (its new code, or a swap that failed midway and
cannot be finished yet) is left out the same way: one job's change never ends the run.

The run follows the job files: a job whose code is edited under it is stopped between two
batches and started again with the new code, checked as at the run's start (`follow_code`).

Memory stays bounded however long it runs: per query it keeps running totals and the latest
progress row, not the rows themselves.

A transient failure of one query (Spark gave up waiting for a new Python worker, which happens
when the cores are saturated: the wait is fixed at 10 s) restarts that query in place, from its
last committed batch, at most ``TRANSIENT_RESTARTS`` times in ``TRANSIENT_WINDOW_SECONDS``; the
other queries go on, and each restart is recorded in ``ops/stream_failures``. Any other failure,
or one more restart than that, ends the run with the query's error.

Stopping is graceful: the queries are stopped side by side, each when no micro-batch is in
flight (or right after the batch in flight reports, for a query that is behind), so the last
batch is committed and the next run, incremental or continuous, starts after it. Were a query
stopped mid-batch (a hard kill), the batch was not committed, and Spark replays it on restart
into idempotent sinks: nothing is lost or written twice either way. A graceful stop then waits,
still holding the checkpoints, for the state snapshots the last commits made to be uploaded
(`settle_snapshots`, as an incremental run does): a process that ended first would lose them,
and the next start would replay every changelog since the last uploaded snapshot. A failed run
does not wait.

Signals: while `run_continuous` runs in a process's main thread, SIGINT (Ctrl-C, a Dagster
termination) and SIGTERM (``kill``, a Kubernetes pod's shutdown) ask for that graceful stop.
Without this, PySpark's own SIGINT handler (installed with the SparkContext) cancels every Spark
job and raises in the middle of a Python-to-JVM call: the batch in flight could commit its gold
write and lose its progress report. A second signal of either kind aborts at once.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from typing import Callable

from pyspark.sql import SparkSession

from streaming_jobs.core.checkpoints import last_committed_batch
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.core.delta_log import latest_version, rows_written
from streaming_jobs.core.locations import Location, is_delta_table
from streaming_jobs.runtime.gold import gold_query, gold_writer, sink_version_of
from streaming_jobs.core import locations
from streaming_jobs.core.versions import REFUSED, version_of
from streaming_jobs.runtime.changes import (
    UnsafeChange,
    changed_since_checkpoint,
    assess,
    check_before_start,
    clear_said,
    current_parts,
    say_left_out,
    say_waiting,
    waiting_change,
)
from streaming_jobs.runtime.ingestion import bronze_writer, screen_landing
from streaming_jobs.core.checkpoints import query_name
from streaming_jobs.storage.registry import get_job
from streaming_jobs.operations import savepoints, shadow
from streaming_jobs.storage import swaps
from streaming_jobs.storage.failures import held, record_failure
from streaming_jobs.runtime.locate import record_job_failure
from streaming_jobs.core.checkpoints import checkpoint_lock, relocate_state_schemas
from streaming_jobs.storage.repairs import mend_at_start
from streaming_jobs.storage.restores import finish_pending
from streaming_jobs.runtime.progress import (
    forget_previous_lineage,
    progress_log,
    restore_lost_progress,
)
from streaming_jobs.runtime.runner import (
    RunMetrics,
    StreamRunError,
    last_reading,
    metrics,
    query_failure,
    settle_snapshots,
)
from streaming_jobs.storage.registry import stream_schema
from streaming_jobs.storage.spark import session_settings

LOG = logging.getLogger(__name__)
IDLE_WAIT_SECONDS = 120.0  # how long a graceful stop waits for the batch in flight
REQUEST_POLL_SECONDS = 1.0  # how often savepoint requests are looked for
# how often the hosted jobs' code is read again (job files are loaded again only once edited:
# 0.04 s for the six built-in jobs)
REFUSED_POLL_SECONDS = 5.0
# how often a job whose start failed (its new code, a swap the store refused midway) is tried
# again: a cause that passes (the store back) heals without anyone touching the job
START_RETRY_SECONDS = 60.0
# How many queries are built and started at once: a query's start is mostly calls into the JVM
# (its plan, its tables' logs, ingestion's parser of a few hundred expressions), which wait on
# each other's answers, not on the cores (`_Host.start_all`)
STARTERS = 4
# how often maintenance requests are (on a store: one listing; the requester waits up to
# retention.MAINTENANCE_PICKUP_SECONDS for its request to be taken)
MAINTENANCE_POLL_SECONDS = 10.0
# Failures that say nothing about the query or its data: Spark starts a Python process for a
# pandas state operator's first batch and waits 10 s (fixed) for it to connect back.
TRANSIENT = (
    "Python worker failed to connect back",
    "Timed out while waiting for the Python worker to connect back",
)
TRANSIENT_RESTARTS = 3
TRANSIENT_WINDOW_SECONDS = 600.0
# The n-th in-place restart waits this x 2^(n-1): on a loaded machine the worker that did not
# connect back in time needs the machine to calm down, not three tries within a minute
TRANSIENT_BACKOFF_SECONDS = 15.0
# A continuous run's queries run their plans interpreted. Spark writes a long or timestamp
# literal into the Java code it generates, and a micro-batch's plan holds values that move every
# batch (its watermark, its batch id and time), so each batch of each query generated, compiled
# and loaded new classes (about 50 a second with every job hosted), which the JIT then compiled
# again: a quarter of the process's CPU at 1,000 events/s per stream (docs/benchmarks.md, "A
# continuous run's generated code"). A query starts with a copy of the session's settings, so
# these hold for the queries this run starts; TIDEMARK_SPARK_CONF naming a key keeps its value.
CONTINUOUS_SQL_CONF = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}


def is_transient(exc: BaseException) -> bool:
    text = f"{exc}\n{getattr(exc, '_stackTrace', '') or ''}"
    return any(marker in text for marker in TRANSIENT)


def may_restart(
    restarts: list[float],
    now: float,
    limit: int = TRANSIENT_RESTARTS,
    window: float = TRANSIENT_WINDOW_SECONDS,
) -> bool:
    """Whether one more in-place restart is allowed, given the times of the earlier ones."""
    return sum(1 for at in restarts if now - at < window) < limit


@dataclass
class Totals:
    """A query's progress since the run started, folded: constant memory however long it runs."""

    batches: int = 0
    input_rows: int = 0
    output_rows: int = 0
    late_rows: int = 0
    last: dict = field(default_factory=dict)
    watermark: object = None

    def add(self, rows: list[dict]) -> None:
        for row in rows:
            self.batches += 1
            self.input_rows += row["num_input_rows"] or 0
            self.output_rows += row["num_output_rows"] or 0
            self.late_rows += row["rows_dropped_by_watermark"] or 0
            self.last = row
            if row["watermark"] is not None and (
                self.watermark is None or row["watermark"] > self.watermark
            ):
                self.watermark = row["watermark"]

    def summary_row(self) -> dict:
        """One synthetic progress row carrying the totals, for `runner.metrics`."""
        return {
            **self.last,
            "num_input_rows": self.input_rows,
            "num_output_rows": self.output_rows,
            "rows_dropped_by_watermark": self.late_rows,
            "watermark": self.watermark,
        }


@dataclass
class QueryReport:
    """One query at a flush: its run so far, and whether it is keeping up."""

    name: str
    metrics: RunMetrics  # since the run started; state and watermark are current
    new_batches: int  # committed since the previous report
    new_rows: int  # read by those batches: an empty batch (after an OPTIMIZE of its source,
    # or to move the watermark on) is no new input
    caught_up: bool  # no batch in flight and no data waiting at its source


@dataclass
class ContinuousRun:
    """What a continuous run did, per query (bronze queries are named ``bronze_<stream>``)."""

    metrics: dict[str, RunMetrics] = field(default_factory=dict)
    stopped_by: str = ""
    signalled: str = ""  # "SIGINT" or "SIGTERM" when a signal asked for the stop
    savepoints_taken: list[str] = field(default_factory=list)
    # on a store, the steps of maintenance requests this run answered ("gold/x optimize")
    maintained: list[str] = field(default_factory=list)
    restarted: list[tuple[str, str]] = field(default_factory=list)  # (query, transient error)
    snapshot_wait_seconds: float = 0.0  # waited at the stop for state snapshots to upload
    held: list[str] = field(default_factory=list)  # queries left out: held (failures.held)
    # jobs left out: a new version their state cannot take (changes.UnsafeChange), each said
    refused: list[str] = field(default_factory=list)
    # swaps of a hosted job's version this run carried out ("<job> rebuild <a> -> <b>")
    swapped: list[str] = field(default_factory=list)
    # refused jobs this run started once their code passed the check ("<job> at version <v>")
    admitted: list[str] = field(default_factory=list)
    # versions of a hosted job accepted for its checkpoint through this run ("<job> <a> -> <b>")
    accepted: list[str] = field(default_factory=list)
    # safe changes of a job's code made under the run, run from the next batch ("<job> <a> -> <b>")
    applied: list[str] = field(default_factory=list)
    # torn newest checkpoint files set aside at the start (`repairs.mend_at_start`), each said
    repaired: list[str] = field(default_factory=list)


class _Host:
    """The queries of one continuous run, their totals, and their savepoint requests."""

    def __init__(
        self,
        spark: SparkSession,
        cfg: TidemarkConfig,
        streams,
        jobs,
        trigger_seconds: float,
        refused: dict[str, str] | None = None,
    ) -> None:
        self.spark, self.cfg, self.trigger = spark, cfg, f"{trigger_seconds} seconds"
        # hosted jobs left out, each with the version of its code the check refused
        self.refused: dict[str, str] = dict(refused or {})
        # jobs left out by a failed start: when it is tried again (a half-made swap finished)
        self.start_retry: dict[str, float] = {}
        self.log = progress_log(spark)
        self.streams = {query_name(s): s for s in streams}
        self.jobs = list(jobs)
        self.names = [*self.streams, *self.jobs]
        self.queries: dict = {}
        self.totals = {name: Totals() for name in self.names}
        self.reported = {name: 0 for name in self.names}
        self.reported_rows = {name: 0 for name in self.names}
        self.previous = {name: last_reading(cfg, name) for name in self.names}
        self.specs = {job: get_job(job) for job in self.jobs}  # loaded once, not per flush
        # the version of its code each job runs at here, and the version its file holds that
        # the state cannot take, with what was said of it (`follow_code`)
        self.running = {job: version_of(current_parts(spec)) for job, spec in self.specs.items()}
        self.waiting: dict[str, tuple[str, str]] = {}
        self.resolvers = {job: sink_version_of(cfg, spec) for job, spec in self.specs.items()}
        self.restarts: dict[str, list[float]] = {name: [] for name in self.names}
        # per query: the versions of its tables read so far, and the rows they added since
        self.committed_to: dict[str, list[int]] = {}
        self.restart_due: dict[str, float] = {}  # query -> when its in-place restart is due
        self.rows_written = {name: [0, 0] for name in self.names}
        self.started = time.monotonic()
        from streaming_jobs.storage.kafka import source_of

        self.landing = [
            cfg.paths.landing_dir(s)
            for s in streams
            if source_of(cfg, stream_schema(s)) == "landing"
        ]

    def screen(self) -> None:
        """Move aside what the hosted streams' ingestion must not read (`screen_landing`)."""
        for folder in self.landing:
            screen_landing(folder)

    def writer(self, name: str):
        if name in self.streams:
            return bronze_writer(self.spark, self.cfg, stream_schema(self.streams[name]))[0]
        return gold_writer(self.spark, self.cfg, self.specs[name])

    def tables(self, name: str) -> tuple:
        """Where the query's rows go: (bronze, quarantine) for ingestion, (gold, None) for a job."""
        if name in self.streams:
            stream = self.streams[name]
            return (
                self.cfg.paths.table("bronze", stream),
                self.cfg.paths.table("quarantine", stream),
            )
        return self.cfg.paths.table("gold", name), None

    def start(self, name: str) -> None:
        writer = self.writer(name)  # creates the query's tables
        if name not in self.committed_to:  # (not again on an in-place restart)
            self.committed_to[name] = [
                -1 if t is None else latest_version(t) for t in self.tables(name)
            ]
        self.queries[name] = writer.trigger(processingTime=self.trigger).start()

    def start_all(self) -> None:
        """Start every query, ``STARTERS`` at a time. One after the other, on a quiet machine,
        the last of eleven started 10 s after the first, and after a crash later still: the
        first queries' batches took the cores while the others were being built.

        The jobs start first (a restart's slowest first commits are theirs), except a job whose
        bronze table does not exist yet: its stream's start creates it, so that job is started
        after it, once it is done. Every query is started or has failed to start before this
        returns (the first error is raised): a started query is then in ``queries``, and the
        run's end stops it."""
        from concurrent.futures import ThreadPoolExecutor

        def unborn(job: str) -> list[str]:
            return [
                query_name(source)
                for source in self.specs[job].sources
                if query_name(source) in self.streams
                and not is_delta_table(self.cfg.paths.table("bronze", source))
            ]

        jobs = [j for j in self.jobs if j not in self.refused]
        waiting = {job: unborn(job) for job in jobs}
        starts: dict = {}
        with ThreadPoolExecutor(STARTERS, thread_name_prefix="tidemark-start") as pool:
            for job in [j for j in jobs if not waiting[j]]:
                starts[job] = pool.submit(self.start, job)
            for stream in self.streams:
                starts[stream] = pool.submit(self.start, stream)

            def after_its_streams(job: str) -> None:
                for stream in waiting[job]:
                    starts[stream].result()  # (submitted before: a thread runs it or ran it)
                self.start(job)

            for job in [j for j in jobs if waiting[j]]:
                starts[job] = pool.submit(after_its_streams, job)
        self.queries = {name: self.queries[name] for name in self.names if name in self.queries}
        for name in starts:
            if starts[name].exception() is not None:
                raise starts[name].exception()

    def written(self, name: str) -> list[int]:
        """Rows the query's commits added to its tables since the run started (output,
        quarantined), from the tables' logs: the sinks report no row count, and a replayed
        batch whose write was skipped commits nothing, so nothing is counted twice."""
        for i, table in enumerate(self.tables(name)):
            if table is not None and name in self.committed_to:
                rows, self.committed_to[name][i] = rows_written(table, self.committed_to[name][i])
                self.rows_written[name][i] += rows
        return self.rows_written[name]

    def flush(self, names=None) -> None:
        for name in names or list(self.queries):
            rows = self.log.take(str(self.queries[name].runId))
            if rows:
                self.log.flush(self.cfg, rows, self.resolvers.get(name), self.specs.get(name))
                self.totals[name].add(rows)

    def metrics(self, name: str) -> RunMetrics:
        totals = self.totals[name]
        rows = [totals.summary_row()] if totals.batches else []
        folded = metrics(
            name,
            rows,
            time.monotonic() - self.started,
            last_committed_batch(self.cfg.paths.checkpoint(name)),
            previous=self.previous[name],
        )
        output, quarantined = self.written(name)
        return replace(
            folded, batches=totals.batches, output_rows=output, quarantined_rows=quarantined
        )

    def reports(self) -> dict[str, QueryReport]:
        out = {}
        for name, query in self.queries.items():
            status = query.status if query.isActive else {}
            totals = self.totals[name]
            new = totals.batches - self.reported[name]
            rows = totals.input_rows - self.reported_rows[name]
            self.reported[name], self.reported_rows[name] = totals.batches, totals.input_rows
            out[name] = QueryReport(
                name,
                self.metrics(name),
                new,
                rows,
                caught_up=bool(query.isActive)
                and not status.get("isTriggerActive")
                and not status.get("isDataAvailable"),
            )
        return out

    def stop(self, name: str) -> None:
        """Stop a query between batches (`_stop_between_batches`), and flush its progress."""
        self._stop_between_batches(name)
        self.flush([name])

    def stop_all(self) -> None:
        """Stop every query between batches, side by side: each waits for its own batch in
        flight, and one after the other those waits added up (a run whose ingestion failed at
        its start, the ten other queries in catch-up batches on a loaded machine, took 3 min
        13 s to end, and the recovery run queued behind it waited as long)."""
        names, errors = list(self.queries), []

        def stop(name: str) -> None:
            try:
                self._stop_between_batches(name)
            except BaseException as exc:  # raised below, once every query had its stop
                errors.append(exc)

        # daemon threads: a second signal's KeyboardInterrupt ends the joins, and the process
        # exits without waiting for the batches in flight
        threads = [
            threading.Thread(target=stop, args=(name,), name=f"tidemark-stop-{name}", daemon=True)
            for name in names
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.flush(names)
        if errors:
            raise errors[0]

    def _stop_between_batches(self, name: str) -> None:
        """Stop a query between batches. A query that is behind starts its next batch the
        instant one ends, so its trigger is never seen idle: it is stopped as soon as the batch
        in flight has reported, when the next one has only begun and has written nothing (a
        stop inside the window between a batch's sink commit and its checkpoint commit makes
        the batch run again with its write skipped, and its report counts nothing)."""
        query = self.queries[name]
        deadline = time.monotonic() + IDLE_WAIT_SECONDS
        run_id = str(query.runId)
        reported = self.log.batches_reported(run_id)
        while (
            query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline
        ):
            if self.log.wait_batch_reported(run_id, reported, timeout=0.2):
                break
        query.stop()
        self.log.wait_terminated(run_id)

    def restart_in_place(self, name: str, exc: BaseException, out: ContinuousRun) -> bool:
        """Start a query that failed transiently again, from its last commit; False when the
        failure is not transient or the query used up its restarts (the run ends)."""
        now = time.monotonic()
        if not is_transient(exc) or not may_restart(self.restarts[name], now):
            return False
        # only the window's restarts are kept: memory stays bounded over a run of days
        self.restarts[name] = [
            at for at in self.restarts[name] if now - at < TRANSIENT_WINDOW_SECONDS
        ] + [now]
        failed = self.queries[name]
        self.log.wait_terminated(str(failed.runId))
        self.flush([name])
        reason, _ = query_failure(exc, self.cfg)
        count = len(self.restarts[name])
        record_failure(
            self.cfg,
            name,
            str(failed.runId),
            f"restarted in place after a transient error (restart {count} of at most "
            f"{TRANSIENT_RESTARTS} in {TRANSIENT_WINDOW_SECONDS:.0f}s): {reason}",
        )
        LOG.warning(
            "continuous: %s failed transiently (%s); restarted from its last commit",
            name,
            reason[:300],
        )
        out.restarted.append((name, reason[:1000]))
        # started again by `start_due` once the backoff has passed; the others go on meanwhile
        self.restart_due[name] = now + TRANSIENT_BACKOFF_SECONDS * 2 ** (count - 1)
        return True

    def failed(self) -> list[tuple[str, Exception]]:
        """Queries that failed and are not waiting to be restarted."""
        return [
            (n, q.exception())
            for n, q in self.queries.items()
            if n not in self.restart_due and q.exception()
        ]

    def start_due(self) -> None:
        now = time.monotonic()
        for name, due in list(self.restart_due.items()):
            if now >= due:
                del self.restart_due[name]
                self.start(name)

    def answer_savepoint_requests(
        self, keep: int, out: ContinuousRun, between: Callable[[], None] = lambda: None
    ) -> None:
        for job in self.jobs:
            if job in self.restart_due:
                continue  # answered once it runs again (its restart must not be started twice)
            for request_id in savepoints.pending(self.cfg, job):
                try:
                    if job in self.queries and self.queries[job].isActive:
                        self.stop(job)  # between batches: nothing in flight, all committed
                    point = savepoints.take_locked(self.cfg, job, keep=keep)
                except Exception as exc:  # noqa: BLE001 - answered, and the run goes on
                    savepoints.answer(self.cfg, job, request_id, error=str(exc)[:1000])
                    LOG.warning("continuous: savepoint of %s failed: %s", job, exc)
                else:
                    savepoints.answer(self.cfg, job, request_id, savepoint=point)
                    out.savepoints_taken.append(point.path.name)
                    LOG.info("continuous: savepoint %s of %s taken", point.path.name, job)
                finally:
                    if job not in self.refused and not self.queries[job].isActive:
                        self.start(job)
                between()

    def answer_swap_requests(
        self, out: ContinuousRun, between: Callable[[], None] = lambda: None
    ) -> None:
        """Carry out the swaps of hosted jobs' versions (and the acceptances of a new version)
        asked of this run (`shadow.swap`): the job's query stopped between batches, the change
        made in this driver (it holds the lock), and the query started again with the job's
        code as it is now. A change that cannot be made is answered with why, and the job runs
        on as it was; a swap that failed after its plan was written is finished first (every
        stage is idempotent), and answered as made once it is."""
        for job in self.jobs:
            if job in self.restart_due:
                continue  # answered once it runs again
            for request_id, asked in shadow.requested(self.cfg, job):
                if job in self.queries and self.queries[job].isActive:
                    self.stop(job)
                kind, done, error = asked.get("kind"), None, ""
                try:
                    try:
                        spec = get_job(job)  # the code on disk: the version the shadow ran
                        done = shadow.carry_out(
                            self.spark, self.cfg, job, kind, spec, asked.get("gate")
                        )
                    except Exception as exc:  # noqa: BLE001 - answered, and the run goes on
                        LOG.warning("continuous: the %s of %s failed: %s", kind, job, exc)
                        error = str(exc)[:2000]
                        try:
                            done = self._finish_swap(job, out)
                        except Exception as again:  # noqa: BLE001 - the job stays out (_admit)
                            error += (
                                f"; its swap was planned, and finishing it failed too "
                                f"({again!s:.500}): the run that hosts the job leaves it out and "
                                f"finishes the swap every {START_RETRY_SECONDS:.0f}s, or its next "
                                "run does"
                            )
                    else:
                        self._changed(job, spec, done, out)
                finally:
                    left_out = self._admit(job, version_of(current_parts(self.specs[job])), out)
                # answered once the job started, or was left out: the requester says which
                if done is None:
                    shadow.answer(self.cfg, job, request_id, error=error)
                else:
                    shadow.answer(self.cfg, job, request_id, done={**done, "left_out": left_out})
                between()

    def _changed(self, job: str, spec, done: dict, out: ContinuousRun) -> None:
        """Take in a change of ``job``'s version made here: its code, and what the run says."""
        self.specs[job] = spec
        self.resolvers[job] = sink_version_of(self.cfg, spec)
        change = f"{job} {done['kind']} {done['from_version']} -> {done['to_version']}"
        if done["kind"] == "accept":  # the record alone: no commit, no row moved
            out.accepted.append(change.replace(" accept ", " ", 1))
        else:
            if job in self.committed_to:  # the swap's own commit is not this run's output
                self.committed_to[job][0] = latest_version(self.cfg.paths.table("gold", job))
            out.swapped.append(change)
        LOG.info("continuous: %s", change)

    def _finish_swap(self, job: str, out: ContinuousRun) -> dict | None:
        """Finish a swap of ``job`` left half made (its plan written, a stage failed); what it
        did, or None when no swap is pending."""
        if swaps.pending(self.cfg, job) is None:
            return None
        done = swaps.finish_pending(lambda: self.spark, self.cfg, job)
        try:
            spec = get_job(job)
        except KeyError:  # its file broken meanwhile: the code as the run had it
            spec = self.specs[job]
        self._changed(job, spec, done, out)
        return done

    def _admit(self, job: str, version: str, out: ContinuousRun) -> str | None:
        """Start ``job`` (at ``version`` of its code) after a change, or a refusal, of its
        version. A swap left half made is finished first, so that the query never reads a
        checkpoint between two versions. A version the checkpoint cannot take, or a start that
        fails (the new code's, or a swap's finish the store refused), leaves the job out, said,
        and the run goes on with the others; the reason then (None: started)."""
        try:
            self._finish_swap(job, out)
            self.start(job)
        except UnsafeChange as exc:  # a rollback to a version the code is not: said, left out
            self.refused[job] = version
            self.start_retry.pop(job, None)  # (the same code is refused again: no retry)
            LOG.error("continuous: left out %s", exc)
            out.refused.append(str(exc))
            return str(exc)
        except Exception as exc:  # noqa: BLE001 - one job's change must not end the run
            self.refused[job] = version
            pending = swaps.pending(self.cfg, job) is not None
            self.start_retry[job] = time.monotonic() + START_RETRY_SECONDS
            said = f"job {job}: version {version} could not start: {exc}"
            then = (
                f"the swap is finished and the job started again in {START_RETRY_SECONDS:.0f}s"
                if pending
                else f"this run tries again every {START_RETRY_SECONDS:.0f}s, and at once when "
                "its code changes: fix the job if the error is in it"
            )
            # for the health sensor, until a run passes the check again
            _saying(say_left_out, self.cfg.paths.checkpoint(job), version, f"{said[:2000]}; {then}")
            if not (out.refused and out.refused[-1] == said):  # (a retry failing alike: once)
                LOG.error("continuous: %s stays out: %s; %s", job, said, then)
                out.refused.append(said)
            return f"{said}; {then}"
        self.refused.pop(job, None)
        self.start_retry.pop(job, None)
        self.waiting.pop(job, None)  # (its check passed: what it said is removed)
        self.running[job] = version
        return None

    def retry_refused(self, out: ContinuousRun) -> None:
        """Start each refused job whose code changed since the check refused it and now passes
        it (put back as its checkpoint's version, or accepted); a job whose code changed to
        another refused version stays out, said again. A job whose start failed is tried again
        every ``START_RETRY_SECONDS`` (a swap left half made finished first), whether or not its
        code changed: a cause that passed heals, one in the code fails again, said once."""
        for job, refused_version in list(self.refused.items()):
            try:
                spec = get_job(job)
            except KeyError as exc:  # its file broken meanwhile: the health sensor says so
                LOG.warning("continuous: %s stays out: %s", job, exc)
                continue
            version = version_of(current_parts(spec))
            retry_at = self.start_retry.get(job)
            if version == refused_version and not (retry_at and time.monotonic() >= retry_at):
                continue
            self.specs[job], self.resolvers[job] = spec, sink_version_of(self.cfg, spec)
            if self._admit(job, version, out) is None:
                out.admitted.append(f"{job} at version {version}")
                LOG.info(
                    "continuous: %s started at version %s, which its checkpoint takes", job, version
                )

    def follow_code(self, out: ContinuousRun) -> None:
        """Follow each running job's file, edited under the run. A change its checkpoint's
        state takes: the job is stopped between two batches and started with the new code,
        which runs from the next batch (the new version recorded; a start that fails leaves it
        out, ``job_left_out``). A change the state cannot take, or code that does not build:
        the job runs on at its version, and ``job_change_waiting`` says what changed and the
        fix (a rebuild or an accept through this run, or the file put back). A file that no
        longer loads changes nothing: the platform sensor says what is wrong with it."""
        for job in self.jobs:
            query = self.queries.get(job)
            if job in self.refused or job in self.restart_due or not query or not query.isActive:
                continue
            try:
                spec = get_job(job)
            except KeyError:
                continue
            checkpoint = self.cfg.paths.checkpoint(job)
            version, was = version_of(current_parts(spec)), self.running.get(job)
            if version == was:
                if self.waiting.pop(job, None) is not None:  # put back as it runs
                    _saying(clear_said, checkpoint)
                    LOG.info("continuous: %s's file is its running version %s again", job, was)
                continue
            if self.waiting.get(job, (None,))[0] == version:
                # (a restart of its query passed the check, which removed what was said)
                if not _saying(locations.exists, Location.of(checkpoint) / REFUSED):
                    _saying(say_waiting, checkpoint, version, self.waiting[job][1])
                continue
            try:
                _, _, changes = assess(self.cfg, spec, gold_query(self.spark, self.cfg, spec))
                unsafe = [c for c in changes if c.unsafe]
                said = waiting_change(spec, was, unsafe) if unsafe else None
            except Exception as exc:  # noqa: BLE001 - the running version goes on
                why = (str(exc).strip().splitlines() or [""])[0][:1000]  # (not Spark's plan)
                said = (
                    f"job {job}: its file is now version {version}, which does not build "
                    f"({why}); the continuous run that hosts it runs on at version {was}. Fix "
                    f"the file, or put it back (`tidemark code {job} --put-back`)"
                )
            if said:
                self.waiting[job] = (version, said)
                _saying(say_waiting, checkpoint, version, said)
                LOG.warning("continuous: %s", said)
                continue
            LOG.info("continuous: the code of %s changed (version %s -> %s)", job, was, version)
            self.stop(job)
            self.specs[job], self.resolvers[job] = spec, sink_version_of(self.cfg, spec)
            if self._admit(job, version, out) is None:
                out.applied.append(f"{job} {was} -> {version}")
                LOG.info("continuous: %s runs on at version %s", job, version)

    def answer_maintenance_requests(
        self, out: ContinuousRun, between: Callable[[], None] = lambda: None
    ) -> None:
        """Maintain, in this driver, the tables of hosted queries that maintenance asked for
        (a data root on a store: one writer per table, and this run is it). An append-only
        table is compacted while its query runs (compaction and appends do not conflict); a
        table the job rewrites with MERGE between its batches, its query stopped meanwhile."""
        from streaming_jobs.core import locations
        from streaming_jobs.operations import retention

        asked = set(locations.names(retention.maintenance_requests(self.cfg)))  # one listing
        for name in self.names:
            if name in self.restart_due or name not in asked:
                continue  # answered once it runs again
            for request_id, request in retention.pending_maintenance(self.cfg, name):
                merged = name in self.specs and self.specs[name].output_mode == "update"
                try:
                    if merged:
                        self.stop(name)  # between batches: nothing in flight
                    done = retention.answer_maintenance(
                        self.spark, self.cfg, name, request_id, request
                    )
                finally:
                    if merged and not self.queries[name].isActive:
                        self.start(name)
                out.maintained.extend(f"{step.target} {step.action}" for step in done.steps)
                LOG.info(
                    "continuous: maintained %s for %s: %s",
                    request["target"],
                    name,
                    ", ".join(step.action for step in done.steps),
                )
                between()  # reports go on between tables


def _saying(write: Callable, *args):
    """What a job's checkpoint says for the health sensor, written (or read): a store that
    refuses it is in the run's log, and the run goes on (None then)."""
    try:
        return write(*args)
    except Exception as exc:  # noqa: BLE001 - see the docstring
        LOG.error("continuous: could not %s for %s: %s", write.__name__, args[0], exc)
        return None


def interpreted_plans(spark: SparkSession, cfg: TidemarkConfig):
    """`CONTINUOUS_SQL_CONF` on the session for a continuous run's life, so that every query it
    starts (again after a savepoint, a swap or an in-place restart too) copies it; the keys
    TIDEMARK_SPARK_CONF names are left alone, and the session's own values come back after."""
    settings = {k: v for k, v in CONTINUOUS_SQL_CONF.items() if k not in cfg.spark.extra_conf}
    return session_settings(spark, settings)


@contextmanager
def stop_on_signals(stop: threading.Event, received: list[str]):
    """SIGINT and SIGTERM set ``stop`` (their names go to ``received``) while the block runs;
    a second one raises KeyboardInterrupt. Outside the main thread (a thread cannot own signal
    handlers) nothing changes, and the caller's ``should_stop`` is the only way to stop."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_signal(signum, frame):
        name = signal.Signals(signum).name
        if stop.is_set():
            raise KeyboardInterrupt(
                f"continuous run: a second {name}, aborting without a "
                "clean stop (the batch in flight is replayed next run)"
            )
        received.append(name)
        stop.set()
        LOG.warning(
            "continuous: %s received, stopping every query at its next batch boundary "
            "(send it again to abort at once)",
            name,
        )

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


def run_continuous(
    spark: SparkSession,
    cfg: TidemarkConfig,
    *,
    streams=(),
    jobs=(),
    trigger_seconds: float = 10.0,
    should_stop: Callable[[], bool] = lambda: False,
    holder: str = "a continuous run",
    flush_seconds: float = 10.0,
    max_seconds: float | None = None,
    on_flush: Callable[[dict[str, QueryReport]], None] | None = None,
    savepoints_keep: int = 3,
) -> ContinuousRun:
    """Run ``streams`` (bronze ingestion) and ``jobs`` until told to stop; see the module doc."""
    names = [query_name(s) for s in streams] + list(jobs)
    if not names:
        raise ValueError("run_continuous: name at least one stream or job to run")
    out = ContinuousRun()
    # a held query (the same batch failed HOLD_AFTER times) is left out; the others run
    holds = [h for h in (held(cfg, name) for name in names) if h is not None]
    if holds:
        out.held = [h.query for h in holds]
        for hold in holds:
            LOG.error("continuous: left out %s", hold.message())
        if len(holds) == len(names):
            raise StreamRunError(
                "continuous run: every query is held: "
                + " ".join(f"streaming query {h.message()}" for h in holds)
            )
        streams = [s for s in streams if query_name(s) not in out.held]
        jobs = [j for j in jobs if j not in out.held]
        names = [n for n in names if n not in out.held]
    signalled, received = threading.Event(), []
    with ExitStack() as locks:
        locks.enter_context(stop_on_signals(signalled, received))
        for name in names:  # all or nothing: refuse before starting any query
            locks.enter_context(
                checkpoint_lock(
                    cfg.paths.checkpoint(name), holder, takes_savepoint_requests=name in jobs
                )
            )
        for name in names:
            finish_pending(lambda: spark, cfg, name)  # a restore cut short: finished first
            swaps.finish_pending(lambda: spark, cfg, name)  # and a swap of versions
            if (mended := mend_at_start(cfg, name)) is not None:  # a torn newest log file
                out.repaired.append(mended.said())
            forget_previous_lineage(cfg, name)
            if name in jobs:  # the rows a killed run did not flush, from the checkpoint
                restore_lost_progress(cfg, get_job(name))
                relocate_state_schemas(cfg.paths.checkpoint(name))  # (runner._run_available_now)
        # a job whose new version its state cannot take is left out (still hosted: its
        # requests are answered, and it starts once its code passes); the others run
        refused: dict[str, str] = {}
        for job in [j for j in jobs if changed_since_checkpoint(cfg, get_job(j))]:
            spec = get_job(job)
            try:
                check_before_start(cfg, spec, gold_query(spark, cfg, spec))
            except UnsafeChange as exc:
                LOG.error("continuous: left out %s", exc)
                out.refused.append(str(exc))
                refused[job] = version_of(current_parts(spec))
        if set(names) <= set(refused):
            raise StreamRunError(
                "continuous run: no query can start: " + " ".join(out.refused + out.held)
            )
        locks.enter_context(interpreted_plans(spark, cfg))
        host = _Host(spark, cfg, streams, jobs, trigger_seconds, refused)
        began = time.time()  # state files written since (settle_snapshots compares mtimes)
        failure: tuple[str, Exception] | None = None
        try:
            host.start_all()
            last_flush = last_poll = last_maintenance = last_refused = time.monotonic()

            def flush_when_due() -> None:
                nonlocal last_flush
                if time.monotonic() - last_flush >= flush_seconds:
                    host.flush()
                    last_flush = time.monotonic()
                    if on_flush:
                        on_flush(host.reports())

            while True:
                host.start_due()
                failed = [(n, e) for n, e in host.failed() if not host.restart_in_place(n, e, out)]
                if failed:
                    failure = failed[0]
                    out.stopped_by = f"query {failure[0]} failed"
                    break
                if signalled.is_set():
                    out.signalled = received[0]
                    out.stopped_by = f"{received[0]} received"
                    break
                if should_stop():
                    out.stopped_by = "stop requested"
                    break
                if max_seconds is not None and time.monotonic() - host.started >= max_seconds:
                    out.stopped_by = f"max_seconds={max_seconds:g} reached"
                    break
                if time.monotonic() - last_poll >= REQUEST_POLL_SECONDS:
                    # (reports go on between savepoints: several take minutes)
                    host.answer_savepoint_requests(savepoints_keep, out, flush_when_due)
                    host.answer_swap_requests(out, flush_when_due)
                    if time.monotonic() - last_refused >= REFUSED_POLL_SECONDS:
                        host.retry_refused(out)
                        host.follow_code(out)
                        last_refused = time.monotonic()
                    if (
                        cfg.on_store
                        and time.monotonic() - last_maintenance >= MAINTENANCE_POLL_SECONDS
                    ):
                        host.answer_maintenance_requests(out, flush_when_due)
                        last_maintenance = time.monotonic()
                    last_poll = time.monotonic()
                flush_when_due()
                host.screen()
                time.sleep(0.5)
        except BaseException:  # an error, or a second signal: the queries are still stopped
            out.stopped_by = out.stopped_by or "interrupted"
            raise
        finally:
            host.stop_all()
            # a job refused from the start ran no batch here: said in ``refused``, not reported
            out.metrics = {
                name: host.metrics(name) for name in host.names if name in host.committed_to
            }
        if not failure:
            # one maintenance pass uploads every store's snapshot: the later calls find none
            out.snapshot_wait_seconds = sum(
                settle_snapshots(spark, name, cfg.paths.checkpoint(name), began)
                for name in host.names
                if name in host.committed_to
            )
        if failure:
            name, exc = failure
            reason, todo = query_failure(exc, cfg)
            record_job_failure(
                spark, cfg, name, str(host.queries[name].runId), reason, host.specs.get(name)
            )
            raise StreamRunError(
                f"continuous run: streaming query {name} failed (checkpoint "
                f"{cfg.paths.checkpoint(name)}): {reason}. The other queries were stopped cleanly. "
                f"{todo.replace('run it again', 'start the run again')}: every query resumes "
                "from its last committed batch."
            )
    return out
