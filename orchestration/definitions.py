"""The one Definitions of tidemark's Dagster code location (loaded by workspace.yaml)."""

from __future__ import annotations

from dagster import (AssetSelection, DefaultScheduleStatus, Definitions, ScheduleDefinition,
                     define_asset_job, in_process_executor)

from streaming_jobs.config import TidemarkConfig

from orchestration.assets.dbt import RECON_GROUP, build_dbt_assets
from orchestration.assets.streaming import STREAM_PROGRESS, STREAMING_GROUP, streaming_assets
from orchestration.continuous import continuous_streaming_job
from orchestration.recovery import recovery_job, savepoint_job, savepoint_schedule
from orchestration.resources import build_resources
from orchestration.sensors import (checkpoint_health_sensor, ops_checks, state_size_sensor,
                                   streaming_restart_sensor)

# One process for a run's steps: every Spark step shares one SparkSession (one JVM).
tidemark_all_job = define_asset_job(
    "tidemark_all_job",
    selection=AssetSelection.all(),
    executor_def=in_process_executor,
    description="Ingest, run every streaming job incrementally, then reconcile with dbt.",
)
streaming_job = define_asset_job(
    "streaming_job",
    # the ops checks run in the sensors (and the whole-graph job), not after every wave
    selection=AssetSelection.groups(STREAMING_GROUP).without_checks(),
    executor_def=in_process_executor,
    description="Ingest and run every streaming job incrementally (no reconciliation).",
)

reconciliation_job = define_asset_job(
    "reconciliation_job",
    selection=AssetSelection.groups(RECON_GROUP),
    executor_def=in_process_executor,
    description="Recompute every job's aggregates in batch with dbt and reconcile them with "
                "what the streams wrote (no streaming).",
)


def reconciliation_schedule(cfg: TidemarkConfig) -> ScheduleDefinition:
    """Reconciliation on a cron (TIDEMARK_RECON_CRON, default hourly, UTC)."""
    return ScheduleDefinition(
        name="reconciliation_schedule",
        job=reconciliation_job,
        cron_schedule=cfg.recon_cron,
        execution_timezone="UTC",
        default_status=DefaultScheduleStatus.RUNNING,
        description=f"Reconcile every streamed table with its batch recomputation ({cfg.recon_cron}).",
    )


def build_definitions(cfg: TidemarkConfig | None = None) -> Definitions:
    cfg = cfg or TidemarkConfig.from_env()
    return Definitions(
        assets=[*streaming_assets(), build_dbt_assets(cfg), STREAM_PROGRESS],
        asset_checks=ops_checks(),
        jobs=[tidemark_all_job, streaming_job, reconciliation_job, continuous_streaming_job,
              recovery_job, savepoint_job],
        schedules=[reconciliation_schedule(cfg), savepoint_schedule(cfg)],
        sensors=[checkpoint_health_sensor, state_size_sensor, streaming_restart_sensor],
        resources=build_resources(cfg),
    )


defs = build_definitions()
