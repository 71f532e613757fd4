"""``streaming_restart_sensor``: a failed continuous run is launched again, with backoff.

The n-th restart waits ``TIDEMARK_RESTART_BACKOFF_SECONDS`` x 2^(n-1) after the failure; after
``TIDEMARK_RESTART_ATTEMPTS`` restarts it gives up with one critical ``restart_exhausted`` alert.
A restarted run resumes every query from its last committed batch.
"""

import json
import time

import dagster as dg

from streaming_jobs.operations import alerts

from orchestration.defs.streaming.jobs import CONTINUOUS_JOB
from orchestration.resources import TidemarkResource

ATTEMPT_TAG = "tidemark/restart_attempt"
RESTART_OF_TAG = "tidemark/restart_of"


@dg.sensor(name="streaming_restart_sensor", job_name=CONTINUOUS_JOB,
        minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING,
        description="Restarts a failed streaming run with backoff; after the last attempt, a "
                    "critical alert.")
def streaming_restart_sensor(context: dg.SensorEvaluationContext, tidemark: TidemarkResource):
    cfg = tidemark.config()
    handled = set(json.loads(context.cursor or "[]"))
    requests, now = [], time.time()
    failed = context.instance.get_runs(
        filters=dg.RunsFilter(job_name=CONTINUOUS_JOB,
                           statuses=[dg.DagsterRunStatus.FAILURE]), limit=50)
    for run in failed:
        if run.run_id in handled:
            continue
        attempt = int(run.tags.get(ATTEMPT_TAG, "0")) + 1
        if attempt > cfg.ops.restart_attempts:
            alerts.raise_alert(
                cfg, job=run.job_name, kind="restart_exhausted", severity="critical",
                dedup_key=f"restart:{run.tags.get(RESTART_OF_TAG, run.run_id)}",
                message=(f"{run.job_name}: run {run.run_id} failed after "
                         f"{cfg.ops.restart_attempts} restarts; giving up. Look at the run's "
                         "error, fix the cause, then launch it again."))
            alerts.deliver(cfg)
            handled.add(run.run_id)
            continue
        stats = context.instance.get_run_stats(run.run_id)
        ended = stats.end_time or now
        wait = cfg.ops.restart_backoff_seconds * 2 ** (attempt - 1)
        if now - ended < wait:
            continue  # backing off; looked at again next tick
        requests.append(dg.RunRequest(
            run_key=f"restart:{run.run_id}", job_name=run.job_name, run_config=run.run_config,
            tags={ATTEMPT_TAG: str(attempt),
                  RESTART_OF_TAG: run.tags.get(RESTART_OF_TAG, run.run_id)}))
        handled.add(run.run_id)
    return dg.SensorResult(run_requests=requests, cursor=json.dumps(sorted(handled)[-500:]))


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions(sensors=[streaming_restart_sensor])
