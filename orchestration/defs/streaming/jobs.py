"""The streaming jobs: ``streaming_job`` (every streaming asset, incrementally) and
``continuous_streaming_job`` (one long-running run hosting streaming queries).

Launch the continuous job from the Dagster UI (or `tidemark continuous`, or `make live`);
terminate it from the UI to stop. While it runs it is live in the UI: at every flush each query
that committed batches reports a materialization of its asset with the real counts, state and
watermark, and one that is caught up with nothing to commit reports a heartbeat now and then
(so the asset stays fresh; a stalled query stops reporting and goes stale). It also answers
savepoint requests for the jobs it hosts (`savepoint_job`).

Termination reaches the op two ways and both stop the queries gracefully: the run turns
CANCELING (polled every half second), or the run worker is interrupted. The op then reports a
final materialization per query.

Both jobs carry a checkpoint tag for every query they can drive (`orchestration.lib.concurrency`),
so the queue holds one while the other owns the checkpoints; the continuous job also carries
the continuous tag, so its reports do not trigger a reconciliation each (the schedule
reconciles continuous jobs).
"""

import time

import dagster as dg
from dagster._core.errors import DagsterExecutionInterruptedError
from pydantic import Field

from streaming_jobs.operations.continuous import QueryReport, run_continuous
from streaming_jobs.services import processes
from streaming_jobs.storage.registry import get_job, registry

from orchestration.lib import keys
from orchestration.lib.concurrency import CONTINUOUS_TAG, all_queries, checkpoint_tags
from orchestration.defs.streaming.assets import STREAMING_GROUP
from orchestration.lib.metadata import continuous_description, run_metadata
from orchestration.lib.resources import TidemarkResource, TidemarkSparkResource

WORKER_TAG = "tidemark/worker"  # host:pid:start of the process running a continuous run

STOPPING = (dg.DagsterRunStatus.CANCELING, dg.DagsterRunStatus.CANCELED)
CONTINUOUS_JOB = "continuous_streaming_job"


class ContinuousConfig(dg.Config):
    jobs: list[str] = Field(
        default_factory=list, description="jobs to host (default: every registered job)"
    )
    ingest: bool = Field(True, description="also run the bronze ingestion of their sources")
    trigger_seconds: float = Field(10.0, description="processing-time trigger interval")
    flush_seconds: float = Field(
        30.0, description="how often progress reaches ops/stream_progress and the UI"
    )
    heartbeat_seconds: float = Field(
        300.0,
        description="how often a query that is caught up and commits nothing reports "
        "anyway (keeps its asset fresh in the UI)",
    )
    max_seconds: float = Field(0.0, description="stop after this long (0: run until terminated)")


@dg.op(out={}, description="Run streaming queries continuously until the run is terminated.")
def run_continuously(
    context: dg.OpExecutionContext,
    config: ContinuousConfig,
    pyspark: TidemarkSparkResource,
    tidemark: TidemarkResource,
):
    cfg = tidemark.config()
    names = config.jobs or list(registry())
    specs = [get_job(name) for name in names]  # unknown names fail here, with the list
    streams = sorted({s for spec in specs for s in spec.sources}) if config.ingest else []
    run_id = context.run_id
    # who runs it: streaming_restart_sensor marks the run failed once this process has ended
    # without a word when no code server is left to say so (see its module doc)
    context.instance.add_run_tags(run_id, {WORKER_TAG: processes.identity()})

    def should_stop() -> bool:
        run = context.instance.get_run_by_id(run_id)
        return run is not None and run.status in STOPPING

    def report(name: str, metrics, description: str) -> dg.AssetMaterialization:
        key = keys.of_query(name)
        return dg.AssetMaterialization(
            asset_key=key,
            description=description,
            metadata=run_metadata(metrics, str(keys.table_path(cfg, key))),
        )

    last_report: dict[str, float] = {}

    def on_flush(reports: dict[str, QueryReport]) -> None:
        now = time.monotonic()
        for name, r in reports.items():
            # Committing: report. Nothing to commit and caught up: a heartbeat now and then
            # (the asset stays fresh). Stalled (not caught up, nothing committed): silence, so
            # the asset goes stale in the UI.
            heartbeat = r.caught_up and now - last_report.get(name, 0.0) >= config.heartbeat_seconds
            if r.new_batches or heartbeat:
                last_report[name] = now
                context.log_event(
                    report(
                        name,
                        r.metrics,
                        continuous_description(run_id, r.new_batches, r.new_rows, r.caught_up),
                    )
                )
        context.log.info(
            "continuous: "
            + ", ".join(
                f"{n} batch {r.metrics.checkpoint_batch_id} (+{r.new_batches})"
                for n, r in reports.items()
            )
        )

    context.log.info(
        f"continuous run hosting {', '.join(names)}"
        + (f" and ingesting {', '.join(streams)}" if streams else "")
    )
    spark = pyspark.spark_session
    # Terminating the run from Dagster interrupts the run worker (SIGINT); run_continuous takes
    # it as a request for the clean stop (between batches, every report flushed).
    result = run_continuous(
        spark,
        cfg,
        streams=streams,
        jobs=names,
        trigger_seconds=config.trigger_seconds,
        should_stop=should_stop,
        holder=f"Dagster run {run_id}",
        flush_seconds=config.flush_seconds,
        max_seconds=config.max_seconds or None,
        on_flush=on_flush,
        savepoints_keep=cfg.ops.savepoints_keep,
    )
    context.log.info(
        f"continuous run stopped ({result.stopped_by}); checkpoints committed; "
        f"savepoints taken: {', '.join(result.savepoints_taken) or 'none'}; "
        f"{result.snapshot_wait_seconds:.1f}s waited for state snapshots to upload"
    )
    for name, reason in result.restarted:
        context.log.warning(f"{name} was restarted in place after a transient error: {reason}")
    for said in result.refused:
        context.log.warning(f"left out: {said}")
    for said in result.repaired:
        context.log.warning(f"repaired at the run's start: {said}")
    for what, done in (
        ("swapped", result.swapped),
        ("accepted", result.accepted),
        ("its code changed, run at the new version", result.applied),
        ("started once its code passed the check", result.admitted),
    ):
        for change in done:
            context.log.info(f"{what}: {change}")
    for name, metrics in result.metrics.items():
        yield report(name, metrics, f"continuous run {run_id[:8]}: {result.stopped_by}")
    if result.signalled or should_stop():
        # Terminated from Dagster: end as CANCELED (after the clean stop and the report above).
        raise DagsterExecutionInterruptedError(
            f"continuous run terminated from Dagster ({result.stopped_by}); queries stopped "
            "cleanly at a committed batch"
        )


def continuous_streaming_job(queries: list[str] | None = None) -> dg.JobDefinition:
    """The job, tagged as the owner of ``queries`` (default: every registered query)."""
    owned = all_queries() if queries is None else queries

    @dg.job(
        name=CONTINUOUS_JOB,
        executor_def=dg.in_process_executor,
        tags={CONTINUOUS_TAG: "1", **checkpoint_tags(owned)},
        description="Host streaming queries continuously (processing-time trigger) until "
        "terminated.",
    )
    def _continuous():
        run_continuously()

    return _continuous


def streaming_job():
    return dg.define_asset_job(
        "streaming_job",
        # the ops checks run in the sensors (and the whole-graph job), not after every wave
        selection=dg.AssetSelection.groups(STREAMING_GROUP).without_checks(),
        # one process per run: every Spark step shares one SparkSession (one JVM)
        executor_def=dg.in_process_executor,
        tags=checkpoint_tags(all_queries()),
        description="Ingest and run every streaming job incrementally (no reconciliation).",
    )


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions(jobs=[streaming_job(), continuous_streaming_job()])
