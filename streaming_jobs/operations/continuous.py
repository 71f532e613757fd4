"""Continuous mode: a group of queries in one SparkSession, on a processing-time trigger.

`run_continuous` owns every checkpoint of the group for its whole life (a second run on any of
them is refused, see `locks`), starts the queries, flushes their progress to
``ops/stream_progress`` every ``flush_seconds`` (so sensors see fresh state sizes) and runs
until ``should_stop()`` says so, a query fails, or ``max_seconds`` pass.

Stopping is graceful: each query is stopped when no micro-batch is in flight, so the last
batch is committed and the next run, incremental or continuous, starts after it. Were a query
stopped mid-batch (a hard kill), the batch was not committed, and Spark replays it on restart
into idempotent sinks: nothing is lost or written twice either way.
"""

from __future__ import annotations

import logging
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Callable

from pyspark.sql import SparkSession

from streaming_jobs.checkpoints import last_committed_batch
from streaming_jobs.config import TidemarkConfig
from streaming_jobs.gold import gold_writer
from streaming_jobs.ingestion import bronze_writer, query_name
from streaming_jobs.jobs import get_job
from streaming_jobs.operations.failures import record_failure
from streaming_jobs.operations.locks import checkpoint_lock
from streaming_jobs.progress import progress_log
from streaming_jobs.runner import RunMetrics, StreamRunError, metrics
from streaming_jobs.schemas import stream_schema

LOG = logging.getLogger(__name__)
IDLE_WAIT_SECONDS = 120.0  # how long a graceful stop waits for the batch in flight


@dataclass
class ContinuousRun:
    """What a continuous run did, per query (bronze queries are named ``bronze_<stream>``)."""

    metrics: dict[str, RunMetrics] = field(default_factory=dict)
    stopped_by: str = ""


def _writers(spark: SparkSession, cfg: TidemarkConfig, streams, jobs) -> dict:
    writers = {}
    for stream in streams:
        writers[query_name(stream)] = bronze_writer(spark, cfg, stream_schema(stream))[0]
    for job in jobs:
        writers[job] = gold_writer(spark, cfg, get_job(job))
    return writers


def _stop_gracefully(query) -> None:
    deadline = time.monotonic() + IDLE_WAIT_SECONDS
    while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.2)
    query.stop()


def run_continuous(spark: SparkSession, cfg: TidemarkConfig, *, streams=(), jobs=(),
                   trigger_seconds: float = 10.0, should_stop: Callable[[], bool] = lambda: False,
                   holder: str = "a continuous run", flush_seconds: float = 10.0,
                   max_seconds: float | None = None,
                   on_flush: Callable[[dict[str, RunMetrics]], None] | None = None) -> ContinuousRun:
    """Run ``streams`` (bronze ingestion) and ``jobs`` until told to stop; see the module doc."""
    names = [query_name(s) for s in streams] + list(jobs)
    if not names:
        raise ValueError("run_continuous: name at least one stream or job to run")
    log = progress_log(spark)
    out = ContinuousRun()
    with ExitStack() as locks:
        for name in names:  # all or nothing: refuse before starting any query
            locks.enter_context(checkpoint_lock(cfg.paths.checkpoint(name), holder))
        writers = _writers(spark, cfg, streams, jobs)
        started = time.monotonic()
        queries = {}
        rows: dict[str, list[dict]] = {name: [] for name in names}
        failure: tuple[str, Exception] | None = None
        try:
            for name, writer in writers.items():
                queries[name] = writer.trigger(processingTime=f"{trigger_seconds} seconds").start()
            last_flush = time.monotonic()
            while True:
                failed = [(n, q.exception()) for n, q in queries.items() if q.exception()]
                if failed:
                    failure = failed[0]
                    out.stopped_by = f"query {failure[0]} failed"
                    break
                if should_stop():
                    out.stopped_by = "stop requested"
                    break
                if max_seconds is not None and time.monotonic() - started >= max_seconds:
                    out.stopped_by = f"max_seconds={max_seconds:g} reached"
                    break
                if time.monotonic() - last_flush >= flush_seconds:
                    _flush(spark, cfg, log, queries, rows)
                    last_flush = time.monotonic()
                    if on_flush:
                        on_flush(_all_metrics(cfg, rows, started))
                time.sleep(0.5)
        except BaseException:  # a Dagster termination (interrupt) lands here: stop cleanly
            out.stopped_by = out.stopped_by or "interrupted"
            raise
        finally:
            for query in queries.values():
                _stop_gracefully(query)
            for query in queries.values():
                log.wait_terminated(str(query.runId))
            _flush(spark, cfg, log, queries, rows)
            out.metrics = _all_metrics(cfg, rows, started)
        if failure:
            name, exc = failure
            record_failure(spark, cfg, name, str(queries[name].runId), str(exc))
            raise StreamRunError(
                f"continuous run: streaming query {name} failed (checkpoint "
                f"{cfg.paths.checkpoint(name)}): {exc}. The other queries were stopped cleanly. "
                "Fix the cause and start the run again: every query resumes from its last "
                "committed batch.")
    return out


def _flush(spark, cfg, log, queries, rows) -> None:
    fresh = []
    for name, query in queries.items():
        taken = log.take(str(query.runId))
        rows[name].extend(taken)
        fresh.extend(taken)
    log.flush(spark, cfg.paths.table("ops", "stream_progress"), fresh)


def _all_metrics(cfg, rows, started) -> dict[str, RunMetrics]:
    seconds = time.monotonic() - started
    return {name: metrics(name, batch_rows, seconds, last_committed_batch(cfg.paths.checkpoint(name)))
            for name, batch_rows in rows.items()}
