"""``reconciliation_schedule``: reconciliation on a cron (TIDEMARK_RECON_CRON, default hourly).

Each run is incremental (`orchestration.recon.recon_partitions`): it recomputes the days its new
events change, and carries today's partition. A tick is skipped while a reconciliation is still queued or running (this schedule's, one
launched by hand, or automation's): each run reconciles everything up to the streams' position
when it starts, so the next one loses nothing, and ticks faster than a reconciliation never
pile runs up in the queue.
"""

import dagster as dg

from streaming_jobs.core.config import TidemarkConfig

from orchestration.lib.concurrency import RECON_TAG, run_in_flight
from orchestration.recon.recon_partitions import INCREMENTAL, RECON_MODE_TAG, latest_partition


def reconciliation_schedule(cfg: TidemarkConfig) -> dg.ScheduleDefinition:
    @dg.schedule(
        name="reconciliation_schedule",
        job_name="reconciliation_job",
        cron_schedule=cfg.recon_cron,
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description=f"Reconcile every streamed table with its batch recomputation "
        f"({cfg.recon_cron}); skips a tick while one is still running.",
    )
    def _reconciliation_schedule(context: dg.ScheduleEvaluationContext):
        busy = run_in_flight(context.instance, tags={RECON_TAG: "1"})
        if busy is not None:
            return dg.SkipReason(
                f"reconciliation run {busy.run_id[:8]} is still "
                f"{busy.status.value.lower()}; this tick is skipped"
            )
        # incremental: what new events change; labelled with today's partition
        return dg.RunRequest(
            partition_key=latest_partition(cfg), tags={RECON_TAG: "1", RECON_MODE_TAG: INCREMENTAL}
        )

    return _reconciliation_schedule


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions(schedules=[reconciliation_schedule(TidemarkConfig.from_env())])
