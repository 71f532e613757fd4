"""The one Definitions of tidemark's Dagster code location (loaded by workspace.yaml)."""

from __future__ import annotations

from dagster import (AssetSelection, AutomationConditionSensorDefinition, DefaultScheduleStatus,
                     DefaultSensorStatus, Definitions, RunRequest, ScheduleDefinition,
                     ScheduleEvaluationContext, SkipReason, define_asset_job, in_process_executor,
                     schedule)

from streaming_jobs.config import TidemarkConfig

from orchestration.assets.dbt import RECON_GROUP, build_dbt_assets
from orchestration.assets.streaming import STREAM_PROGRESS, STREAMING_GROUP, streaming_assets
from orchestration.concurrency import RECON_TAG, all_queries, checkpoint_tags, run_in_flight
from orchestration.continuous import continuous_streaming_job
from orchestration.recovery import recovery_job, savepoint_job, savepoint_schedule
from orchestration.resources import build_resources
from orchestration.sensors import (checkpoint_health_sensor, ops_checks, state_size_sensor,
                                   streaming_restart_sensor)


def asset_jobs() -> list:
    """The asset jobs; one process per run, so its Spark steps share one SparkSession."""
    owns_every_checkpoint = checkpoint_tags(all_queries())
    return [
        define_asset_job(
            "tidemark_all_job", selection=AssetSelection.all(), executor_def=in_process_executor,
            tags={**owns_every_checkpoint, RECON_TAG: "1"},
            description="Ingest, run every streaming job incrementally, then reconcile with dbt."),
        define_asset_job(
            "streaming_job",
            # the ops checks run in the sensors (and the whole-graph job), not after every wave
            selection=AssetSelection.groups(STREAMING_GROUP).without_checks(),
            executor_def=in_process_executor, tags=owns_every_checkpoint,
            description="Ingest and run every streaming job incrementally (no reconciliation)."),
        define_asset_job(
            "reconciliation_job", selection=AssetSelection.groups(RECON_GROUP),
            executor_def=in_process_executor, tags={RECON_TAG: "1"},
            description="Recompute every job's aggregates in batch with dbt and reconcile them "
                        "with what the streams wrote (no streaming; through the SQL endpoint "
                        "when it runs)."),
    ]


def reconciliation_schedule(cfg: TidemarkConfig) -> ScheduleDefinition:
    """Reconciliation on a cron (TIDEMARK_RECON_CRON, default hourly, UTC).

    A tick is skipped while a reconciliation is still queued or running: each run reconciles
    everything up to the streams' position when it starts, so the next one loses nothing, and
    ticks faster than a reconciliation never pile runs up in the queue.
    """

    @schedule(name="reconciliation_schedule", job_name="reconciliation_job",
              cron_schedule=cfg.recon_cron, execution_timezone="UTC",
              default_status=DefaultScheduleStatus.RUNNING,
              description=f"Reconcile every streamed table with its batch recomputation "
                          f"({cfg.recon_cron}); skips a tick while one is still running.")
    def _reconciliation_schedule(context: ScheduleEvaluationContext):
        # any reconciliation: this schedule's, one launched by hand, or automation's
        busy = run_in_flight(context.instance, tags={RECON_TAG: "1"})
        if busy is not None:
            return SkipReason(f"reconciliation run {busy.run_id[:8]} is still "
                              f"{busy.status.value.lower()}; this tick is skipped")
        return RunRequest(tags={RECON_TAG: "1"})

    return _reconciliation_schedule


def reconcile_on_update_sensor() -> AutomationConditionSensorDefinition:
    """Evaluates the dbt assets' automation conditions; on by default in a new instance."""
    return AutomationConditionSensorDefinition(
        "reconcile_on_update_sensor",
        target=AssetSelection.groups(RECON_GROUP),
        default_status=DefaultSensorStatus.RUNNING,
        run_tags={RECON_TAG: "1"},
        minimum_interval_seconds=30,
        description="Reconciles after an incremental run updated a gold or bronze table (the "
                    "dbt assets' reconcile_on_update condition).")


def build_definitions(cfg: TidemarkConfig | None = None) -> Definitions:
    cfg = cfg or TidemarkConfig.from_env()
    return Definitions(
        assets=[*streaming_assets(), build_dbt_assets(cfg), STREAM_PROGRESS],
        asset_checks=ops_checks(),
        jobs=[*asset_jobs(), continuous_streaming_job(), recovery_job, savepoint_job],
        schedules=[reconciliation_schedule(cfg), savepoint_schedule(cfg)],
        sensors=[checkpoint_health_sensor, state_size_sensor, streaming_restart_sensor,
                 reconcile_on_update_sensor()],
        resources=build_resources(cfg),
    )


defs = build_definitions()
