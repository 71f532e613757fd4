"""``savepoint_schedule``: savepoints of every job on a cron (TIDEMARK_SAVEPOINT_CRON), and
``maintenance_schedule``: retention on a cron (TIDEMARK_MAINTENANCE_CRON, daily by default).

A tick is skipped while the previous run of its job is still going.
"""

import dagster as dg

from streaming_jobs.core.config import TidemarkConfig

from orchestration.lib.concurrency import run_in_flight


def _unless_running(name: str, job: str, cron: str, description: str) -> dg.ScheduleDefinition:
    """A schedule of ``job`` that is on in a fresh instance and skips a tick while a run of
    ``job`` is still queued or running."""

    @dg.schedule(
        name=name,
        job_name=job,
        cron_schedule=cron,
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description=description,
    )
    def _schedule(context: dg.ScheduleEvaluationContext):
        busy = run_in_flight(context.instance, job_name=job)
        if busy is not None:
            return dg.SkipReason(
                f"{job} run {busy.run_id[:8]} is still "
                f"{busy.status.value.lower()}; this tick is skipped"
            )
        return dg.RunRequest()

    return _schedule


def savepoint_schedule(cfg: TidemarkConfig) -> dg.ScheduleDefinition:
    return _unless_running(
        "savepoint_schedule",
        "savepoint_job",
        cfg.ops.savepoint_cron,
        f"Savepoints of every job ({cfg.ops.savepoint_cron}), {cfg.ops.savepoints_keep} kept "
        "per job; skips a tick while the previous savepoint run is not done.",
    )


def maintenance_schedule(cfg: TidemarkConfig) -> dg.ScheduleDefinition:
    ops = cfg.ops
    return _unless_running(
        "maintenance_schedule",
        "maintenance_job",
        ops.maintenance_cron,
        f"Retention ({ops.maintenance_cron}): OPTIMIZE and VACUUM (at least "
        f"{ops.vacuum_retain_hours:g} h kept), ops history kept {ops.ops_retention_days:g} days, "
        f"ingested landing files: {ops.landing_retention}; skips a tick while the previous "
        "maintenance run is not done.",
    )


@dg.definitions
def defs() -> dg.Definitions:
    cfg = TidemarkConfig.from_env()
    return dg.Definitions(schedules=[savepoint_schedule(cfg), maintenance_schedule(cfg)])
