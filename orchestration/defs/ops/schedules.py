"""``savepoint_schedule``: savepoints of every job on a cron (TIDEMARK_SAVEPOINT_CRON).

A tick is skipped while the previous savepoint run is still going.
"""

import dagster as dg

from streaming_jobs.config import TidemarkConfig

from orchestration.concurrency import run_in_flight


def savepoint_schedule(cfg: TidemarkConfig) -> dg.ScheduleDefinition:
    @dg.schedule(name="savepoint_schedule", job_name="savepoint_job",
                 cron_schedule=cfg.ops.savepoint_cron, execution_timezone="UTC",
                 default_status=dg.DefaultScheduleStatus.RUNNING,
                 description=f"Savepoints of every job ({cfg.ops.savepoint_cron}), "
                             f"{cfg.ops.savepoints_keep} kept per job; skips a tick while the "
                             "previous savepoint run is not done.")
    def _savepoint_schedule(context: dg.ScheduleEvaluationContext):
        busy = run_in_flight(context.instance, job_name="savepoint_job")
        if busy is not None:
            return dg.SkipReason(f"savepoint run {busy.run_id[:8]} is still "
                                 f"{busy.status.value.lower()}; this tick is skipped")
        return dg.RunRequest()

    return _savepoint_schedule


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions(schedules=[savepoint_schedule(TidemarkConfig.from_env())])
