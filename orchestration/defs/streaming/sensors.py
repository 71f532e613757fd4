"""``streaming_restart_sensor``: a failed continuous run is launched again, with backoff.

A failed continuous run raises a ``continuous_run_failed`` warning at once (one incident per
chain of restarts), resolved when a restart of it commits (reports a batch). The first restart
of a chain is launched at the first tick after the failure: a killed run's locks are free at
once on local disk and for a holder on this host, and a lease held elsewhere is waited out by
the restart itself (`streaming_jobs.core.leases`). The n-th restart waits
``TIDEMARK_RESTART_BACKOFF_SECONDS`` x 2^(n-2) after the failure; after
``TIDEMARK_RESTART_ATTEMPTS`` restarts it gives up with one critical ``restart_exhausted`` alert.
A run that was up ``NEW_CHAIN_AFTER_SECONDS`` and reported a batch before it failed starts a
new chain, so a run that fails once a week is never given up on. A restarted run resumes every
query from its last committed batch.

A run whose process ends without a word (SIGKILL, the OOM killer) is marked failed by the code
server that started it, which waits on its process. If that code server is gone too (killed
with it, restarted, reloaded), nobody does: Dagster's default run launcher has no health check,
and the run would stay STARTED for ever. So the op tags its run with its process
(``tidemark/worker``), and at each tick the sensor marks a STARTED run whose process has ended
failed, with that reason; it is then restarted like any other. A process on another host cannot
be checked from here: such a deployment uses a run launcher with health checks (Docker,
Kubernetes), whose run monitoring fails the run.
"""

import json
import time

import dagster as dg

from streaming_jobs.operations import alerts
from streaming_jobs.services import processes

from orchestration.defs.streaming.jobs import CONTINUOUS_JOB, WORKER_TAG
from orchestration.lib.resources import TidemarkResource

ATTEMPT_TAG = "tidemark/restart_attempt"
RESTART_OF_TAG = "tidemark/restart_of"
FAILED_KIND = "continuous_run_failed"
NEW_CHAIN_AFTER_SECONDS = 600.0  # a run up this long before it failed: restart 1 again


@dg.sensor(
    name="streaming_restart_sensor",
    job_name=CONTINUOUS_JOB,
    # the daemon's sensor loop runs every 5 s at most: a restart waits half as long as at
    # 10 s for its tick, and a tick's CPU did not show beside the daemon's own (docs/benchmarks.md)
    minimum_interval_seconds=5,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Restarts a failed streaming run with backoff; after the last attempt, a "
    "critical alert.",
)
def streaming_restart_sensor(context: dg.SensorEvaluationContext, tidemark: TidemarkResource):
    cfg = tidemark.config()
    handled = set(json.loads(context.cursor or "[]"))
    _fail_ended_workers(context)
    requests, now = [], time.time()
    failed = context.instance.get_runs(
        filters=dg.RunsFilter(job_name=CONTINUOUS_JOB, statuses=[dg.DagsterRunStatus.FAILURE]),
        limit=50,
    )
    changed = _resolve_recovered(context, cfg)
    for run in failed:
        if run.run_id in handled:
            continue
        stats = context.instance.get_run_stats(run.run_id)
        ended = stats.end_time or now
        up = ended - (stats.start_time or ended)
        if up >= NEW_CHAIN_AFTER_SECONDS and _committed(context, run.run_id):
            attempt, first = 1, run.run_id  # it had recovered: a new chain, a new incident
        else:
            attempt = int(run.tags.get(ATTEMPT_TAG, "0")) + 1
            first = run.tags.get(RESTART_OF_TAG, run.run_id)
        changed = True
        if attempt > cfg.ops.restart_attempts:
            alerts.raise_alert(
                cfg,
                job=run.job_name,
                kind="restart_exhausted",
                severity="critical",
                dedup_key=f"restart:{first}",
                message=(
                    f"{run.job_name}: run {run.run_id} failed after "
                    f"{cfg.ops.restart_attempts} restarts; giving up. Look at the run's "
                    "error, fix the cause, then launch it again."
                ),
            )
            handled.add(run.run_id)
            continue
        wait = cfg.ops.restart_wait(attempt)
        # raised at once, refreshed while backing off (one incident, one notification)
        alerts.raise_alert(
            cfg,
            job=run.job_name,
            kind=FAILED_KIND,
            severity="warning",
            dedup_key=f"{FAILED_KIND}:{first}",
            message=(
                f"{run.job_name}: run {run.run_id} failed ({_error(context, run)}); "
                f"streaming_restart_sensor starts it again {_when(wait)} (restart {attempt} "
                f"of {cfg.ops.restart_attempts}), from each query's last committed batch. "
                "Resolved when the restart commits."
            ),
        )
        if now - ended < wait:
            continue  # backing off; looked at again next tick
        requests.append(
            dg.RunRequest(
                run_key=f"restart:{run.run_id}",
                job_name=run.job_name,
                run_config=run.run_config,
                tags={ATTEMPT_TAG: str(attempt), RESTART_OF_TAG: first},
            )
        )
        handled.add(run.run_id)
    if changed:
        alerts.deliver(cfg)
    return dg.SensorResult(run_requests=requests, cursor=json.dumps(sorted(handled)[-500:]))


def _fail_ended_workers(context: dg.SensorEvaluationContext) -> None:
    """Mark failed each STARTED continuous run whose process has ended (see the module doc)."""
    started = context.instance.get_runs(
        filters=dg.RunsFilter(job_name=CONTINUOUS_JOB, statuses=[dg.DagsterRunStatus.STARTED]),
        limit=50,
    )
    for run in started:
        worker = run.tags.get(WORKER_TAG)
        if not worker or processes.ended(worker) is not True:
            continue
        pid = processes.pid_of(worker)
        context.instance.report_run_failed(
            run,
            message=(
                f"{CONTINUOUS_JOB}: the process running run {run.run_id} (pid {pid}) ended "
                "without reporting (killed, or out of memory); its queries resume from their "
                "last committed batch when streaming_restart_sensor starts it again"
            ),
        )
        context.log.warning(f"run {run.run_id}: its process {pid} ended; marked failed")


def _when(wait: float) -> str:
    return f"{wait:.0f}s after the failure" if wait else "at once"


def _committed(context: dg.SensorEvaluationContext, run_id: str) -> bool:
    """Whether the run reported a batch (a continuous run materializes its assets as its
    queries commit)."""
    return bool(
        context.instance.get_records_for_run(
            run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION, limit=1
        ).records
    )


def _error(context: dg.SensorEvaluationContext, run: dg.DagsterRun) -> str:
    """The run's failure, in one line: its step failure's message, else the run failure's (a
    run whose process ended has no step failure) with how its code server saw the process end
    (Dagster's run failure then says only that it was marked failed from outside)."""
    records = context.instance.get_records_for_run(
        run.run_id, of_type=dg.DagsterEventType.STEP_FAILURE, limit=1
    ).records
    if not records:
        failures = context.instance.get_records_for_run(
            run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE, limit=1
        ).records
        message = failures[0].event_log_entry.dagster_event.message if failures else None
        said = [message.strip().splitlines()[0][:300]] if message else []
        said += [ended] if (ended := _process_end(context, run.run_id)) else []
        return "; ".join(part.rstrip(".") for part in said) or "no failure recorded"
    error = records[0].event_log_entry.dagster_event.event_specific_data.error
    cause = error.cause or error
    return f"{cause.cls_name}: {cause.message.strip().splitlines()[0][:300]}"


# What a code server records when a run's process ends on its own or by a signal: "Run
# execution process for <run> was terminated by signal 9 (SIGKILL). This usually indicates ..."
PROCESS_END = "Run execution process for "


def _process_end(context: dg.SensorEvaluationContext, run_id: str) -> str | None:
    """The first sentence of the code server's word on how the run's process ended, if any
    (it guesses at memory after it, which a kill by hand does not fit)."""
    for record in context.instance.get_records_for_run(
        run_id, of_type=dg.DagsterEventType.ENGINE_EVENT, limit=5, ascending=False
    ).records:
        text = record.event_log_entry.dagster_event.message or ""
        if PROCESS_END in text:
            said = text[text.index(PROCESS_END) :]
            return said.split(". ", 1)[0]
    return None


def _resolve_recovered(context: dg.SensorEvaluationContext, cfg) -> bool:
    """Resolve each open ``continuous_run_failed`` incident whose chain has a restarted run that
    reported a batch; True if one was."""
    resolved = False
    for alert in alerts.open_alerts(cfg):
        if alert["kind"] != FAILED_KIND:
            continue
        first = alert["dedup_key"].split(":", 1)[1]
        restarts = context.instance.get_runs(
            filters=dg.RunsFilter(job_name=CONTINUOUS_JOB, tags={RESTART_OF_TAG: first}), limit=20
        )
        for run in restarts:
            if _committed(context, run.run_id):
                alerts.resolve(
                    cfg, alert["dedup_key"], f"run {run.run_id} (a restart of {first}) committed"
                )
                resolved = True
                break
    return resolved


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions(sensors=[streaming_restart_sensor])
