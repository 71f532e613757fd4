"""Recovery and savepoints as Dagster jobs: ``recovery_job``, ``savepoint_job`` and its schedule.

``recovery_job`` is what the checkpoint-health sensor requests for a broken checkpoint: it
restores the job's latest savepoint and runs the job incrementally so it catches up from the
savepoint's batch. With ``restore: false`` it only re-runs the job (a failed query whose
checkpoint is sound).
"""

from dagster import (AssetKey, AssetMaterialization, Config, DefaultScheduleStatus,
                     OpExecutionContext, ScheduleDefinition, in_process_executor, job, op)
from pydantic import Field

from streaming_jobs.config import TidemarkConfig
from streaming_jobs.jobs import get_job, registry
from streaming_jobs.operations import savepoints
from streaming_jobs.operations.locks import CheckpointBusy
from streaming_jobs.runner import run_bronze, run_job

from orchestration.assets.streaming import run_metadata
from orchestration.resources import TidemarkResource, TidemarkSparkResource


class RecoverConfig(Config):
    job: str = Field(description="the streaming job to recover")
    restore: bool = Field(True, description="restore the latest savepoint first")


@op(out={}, description="Restore a job's latest savepoint, then run it until it has caught up.")
def recover(context: OpExecutionContext, config: RecoverConfig, pyspark: TidemarkSparkResource,
            tidemark: TidemarkResource):
    cfg = tidemark.config()
    spec = get_job(config.job)
    spark = pyspark.spark_session
    holder = f"Dagster run {context.run_id} (recovery)"
    if config.restore:
        point = savepoints.restore(spark, cfg, spec.name, holder=holder)
        context.log.info(f"{spec.name}: restored savepoint {point.path.name} (batch "
                         f"{point.batch_id}, gold version {point.gold_version})")
    for source in spec.sources:
        run_bronze(spark, cfg, source, holder=holder)
    metrics = run_job(spark, cfg, spec, holder=holder)
    context.log.info(f"{spec.name}: caught up to batch {metrics.checkpoint_batch_id} "
                     f"({metrics.input_rows} rows replayed)")
    yield AssetMaterialization(
        asset_key=AssetKey(["gold", spec.name]),
        description="recovered" + (" from a savepoint" if config.restore else " by a re-run"),
        metadata=run_metadata(metrics, str(cfg.paths.table("gold", spec.name))))


@job(executor_def=in_process_executor,
     description="Restore a job's latest savepoint and catch it up (requested by the "
                 "checkpoint-health sensor).")
def recovery_job():
    recover()


class SavepointConfig(Config):
    jobs: list[str] = Field(default_factory=list, description="default: every registered job")


@op(out={}, description="Take a savepoint of each job that is not running.")
def take_savepoints(context: OpExecutionContext, config: SavepointConfig,
                    pyspark: TidemarkSparkResource, tidemark: TidemarkResource):
    cfg = tidemark.config()
    for name in config.jobs or list(registry()):
        try:
            point = savepoints.take(pyspark.spark_session, cfg, name, keep=cfg.ops.savepoints_keep,
                                    holder=f"Dagster run {context.run_id} (savepoint)")
        except CheckpointBusy as busy:
            context.log.warning(f"{name}: no savepoint this time: {busy}")
        except savepoints.SavepointError as exc:
            context.log.warning(str(exc))
        else:
            context.log.info(f"{name}: savepoint {point.path.name} (batch {point.batch_id})")


@job(executor_def=in_process_executor,
     description="Savepoint every job between batches (jobs owned by a running run are skipped).")
def savepoint_job():
    take_savepoints()


def savepoint_schedule(cfg: TidemarkConfig) -> ScheduleDefinition:
    return ScheduleDefinition(
        name="savepoint_schedule", job=savepoint_job, cron_schedule=cfg.ops.savepoint_cron,
        execution_timezone="UTC", default_status=DefaultScheduleStatus.RUNNING,
        description=f"Savepoints of every job ({cfg.ops.savepoint_cron}), "
                    f"{cfg.ops.savepoints_keep} kept per job.")
