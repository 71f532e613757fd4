"""``continuous_streaming_job``: one long-running Dagster run hosting streaming queries.

Launch it from the Dagster UI (or `tidemark continuous`); terminate it from the UI to stop.
Termination reaches the op two ways and both stop the queries gracefully: the run turns
CANCELING (polled every half second), or the run worker is interrupted. The op then reports a
materialization per query with what the run did.
"""


from dagster import (AssetKey, AssetMaterialization, Config, DagsterRunStatus, OpExecutionContext,
                     in_process_executor, job, op)
from dagster._core.errors import DagsterExecutionInterruptedError
from pydantic import Field

from streaming_jobs.jobs import get_job, registry
from streaming_jobs.operations.continuous import run_continuous

from orchestration.assets.streaming import run_metadata
from orchestration.resources import TidemarkResource, TidemarkSparkResource

STOPPING = (DagsterRunStatus.CANCELING, DagsterRunStatus.CANCELED)


class ContinuousConfig(Config):
    jobs: list[str] = Field(default_factory=list,
                            description="jobs to host (default: every registered job)")
    ingest: bool = Field(True, description="also run the bronze ingestion of their sources")
    trigger_seconds: float = Field(10.0, description="processing-time trigger interval")
    flush_seconds: float = Field(30.0, description="how often progress reaches ops/stream_progress")
    max_seconds: float = Field(0.0, description="stop after this long (0: run until terminated)")


@op(out={}, description="Run streaming queries continuously until the run is terminated.")
def run_continuously(context: OpExecutionContext, config: ContinuousConfig,
                     pyspark: TidemarkSparkResource, tidemark: TidemarkResource):
    cfg = tidemark.config()
    names = config.jobs or list(registry())
    specs = [get_job(name) for name in names]  # unknown names fail here, with the list
    streams = sorted({s for spec in specs for s in spec.sources}) if config.ingest else []
    run_id = context.run_id

    def should_stop() -> bool:
        run = context.instance.get_run_by_id(run_id)
        return run is not None and run.status in STOPPING

    def on_flush(metrics) -> None:
        context.log.info("continuous: " + ", ".join(
            f"{name} batch {m.checkpoint_batch_id} ({m.input_rows} rows in)"
            for name, m in metrics.items()))

    context.log.info(f"continuous run hosting {', '.join(names)}"
                     + (f" and ingesting {', '.join(streams)}" if streams else ""))
    # An interrupt (the run worker terminated) propagates after run_continuous stopped the
    # queries cleanly.
    result = run_continuous(
        pyspark.spark_session, cfg, streams=streams, jobs=names,
        trigger_seconds=config.trigger_seconds, should_stop=should_stop,
        holder=f"Dagster run {run_id}", flush_seconds=config.flush_seconds,
        max_seconds=config.max_seconds or None, on_flush=on_flush)
    context.log.info(f"continuous run stopped ({result.stopped_by}); checkpoints committed")
    for name, metrics in result.metrics.items():
        layer, table = (("bronze", name.removeprefix("bronze_")) if name.startswith("bronze_")
                        else ("gold", name))
        yield AssetMaterialization(
            asset_key=AssetKey([layer, table]),
            description=f"continuous run {run_id[:8]}: {result.stopped_by}",
            metadata=run_metadata(metrics, str(cfg.paths.table(layer, table))))
    if should_stop():
        # Terminated from Dagster: end as CANCELED (after the clean stop and the report above).
        raise DagsterExecutionInterruptedError(
            f"continuous run terminated from Dagster ({result.stopped_by}); queries stopped "
            "cleanly at a committed batch")


@job(executor_def=in_process_executor,
     description="Host streaming queries continuously (processing-time trigger) until terminated.")
def continuous_streaming_job():
    run_continuously()
