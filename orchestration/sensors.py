"""Sensors that watch the running system: checkpoint health, state size, failed runs.

Each sensor reports its verdicts where people look: asset check evaluations on the job's gold
asset (``checkpoint_health``, ``state_size``), asset observations (state size, plotted over
time), and alerts (`streaming_jobs.operations.alerts`: Delta first, then the log and the
webhook). Alerts are per incident: a condition that persists over many evaluations is one alert,
and its end is one resolution.

Sensors are light: they read checkpoint files and the ops tables (delta-rs) and never start a
JVM, so a tick takes seconds, the first one after start included. They get the data root
through the ``tidemark`` resource, as checks and assets do.
"""

import json
import time

from dagster import (AssetCheckEvaluation, AssetCheckSeverity, AssetKey, AssetObservation,
                     DagsterRunStatus, DefaultSensorStatus, MetadataValue, RunRequest,
                     RunsFilter, SensorEvaluationContext, SensorResult, sensor)

from streaming_jobs.config import TidemarkConfig
from streaming_jobs.jobs import registry
from streaming_jobs.jobs.spec import JobSpec
from streaming_jobs.operations import alerts
from streaming_jobs.operations.health import CRITICAL, check_checkpoint
from streaming_jobs.operations.state import growth, history, level

from orchestration.continuous import JOB_NAME as CONTINUOUS_JOB
from orchestration.recovery import recovery_job, recovery_tags
from orchestration.resources import TidemarkResource

CHECKPOINT_CHECK = "checkpoint_health"
STATE_CHECK = "state_size"
ATTEMPT_TAG = "tidemark/restart_attempt"
RESTART_OF_TAG = "tidemark/restart_of"


def _gold(spec: JobSpec) -> AssetKey:
    return AssetKey(["gold", spec.name])


def _sync_alerts(cfg, job: str, prefix: str, firing: dict[str, tuple[str, str]],
                 resolution: str, open_rows: list[dict]) -> list[alerts.Change]:
    """Open (or refresh) an alert per firing kind; resolve the prefix's other open alerts."""
    changes = []
    for kind, (severity, message) in firing.items():
        changes.append(alerts.raise_alert(cfg, job=job, kind=kind, severity=severity,
                                          message=message, dedup_key=f"{prefix}:{job}:{kind}"))
    for row in open_rows:
        if row["job"] == job and row["dedup_key"].startswith(f"{prefix}:{job}:") and \
                row["dedup_key"].rsplit(":", 1)[1] not in firing:
            alerts.resolve(cfg, row["dedup_key"], resolution)
    return changes


# -- checkpoint health -----------------------------------------------------------------------

def checkpoint_health(cfg: TidemarkConfig, spec: JobSpec):
    """The job's findings and their asset check evaluation."""
    findings = check_checkpoint(cfg, spec.name, spec.sources,
                                stall_seconds=cfg.ops.stall_seconds,
                                idle_seconds=cfg.ops.idle_seconds)
    critical = any(f.severity == CRITICAL for f in findings)
    evaluation = AssetCheckEvaluation(
        asset_key=_gold(spec), check_name=CHECKPOINT_CHECK, passed=not findings,
        severity=AssetCheckSeverity.ERROR if critical else AssetCheckSeverity.WARN,
        metadata={"findings": MetadataValue.int(len(findings)),
                  "details": MetadataValue.md("\n".join(f"- **{f.kind}** ({f.severity}): "
                                                        f"{f.message}" for f in findings)
                                              or "checkpoint healthy")})
    return findings, evaluation


@sensor(name="checkpoint_health_sensor", jobs=[recovery_job], minimum_interval_seconds=60,
        default_status=DefaultSensorStatus.RUNNING,
        description="Per job: checkpoint files readable, batches committing, the query not "
                    "failed, not falling behind. Alerts, and restores a broken checkpoint from "
                    "its latest savepoint.")
def checkpoint_health_sensor(context: SensorEvaluationContext, tidemark: TidemarkResource):
    cfg = tidemark.config()
    events, requests = [], []
    open_rows = alerts.open_alerts(cfg)
    for spec in registry().values():
        findings, evaluation = checkpoint_health(cfg, spec)
        events.append(evaluation)
        firing = {}
        for f in findings:  # one alert per kind; messages of the same kind are joined
            severity, message = firing.get(f.kind, (f.severity, ""))
            firing[f.kind] = (severity, f"{message}; {f.message}" if message else f.message)
        changes = _sync_alerts(cfg, spec.name, "checkpoint", firing,
                               "checkpoint healthy again", open_rows)
        if "checkpoint_corrupt" in firing:
            incident = next(c.alert_id for c in changes if "checkpoint_corrupt" in c.alert_id)
            requests.append(RunRequest(
                run_key=f"restore:{incident}",  # one restore per incident
                job_name=recovery_job.name,
                run_config={"ops": {"recover": {"config": {"job": spec.name, "restore": True}}}},
                tags=recovery_tags(spec)))
    delivery = alerts.deliver(cfg)
    context.log.info(f"checkpoint health: {len(requests)} restores requested; alerts sent "
                     f"{len(delivery.sent)}, failed {len(delivery.failed)}, waiting {delivery.waiting}")
    return SensorResult(asset_events=events, run_requests=requests)


def _checks_for(spec: JobSpec) -> list:
    from dagster import AssetCheckResult, asset_check

    def result(evaluation: AssetCheckEvaluation) -> AssetCheckResult:
        return AssetCheckResult(passed=evaluation.passed, severity=evaluation.severity,
                                metadata=evaluation.metadata)

    @asset_check(asset=_gold(spec), name=CHECKPOINT_CHECK, blocking=False,
                 description="checkpoint files readable, batches committing, query not failed "
                             "(also reported by checkpoint_health_sensor)")
    def health(tidemark: TidemarkResource) -> AssetCheckResult:
        return result(checkpoint_health(tidemark.config(), spec)[1])

    @asset_check(asset=_gold(spec), name=STATE_CHECK, blocking=False,
                 description="state under the job's warn/critical thresholds (also reported "
                             "by state_size_sensor)")
    def state(tidemark: TidemarkResource) -> AssetCheckResult:
        return result(state_evaluation(tidemark.config(), spec))

    return [health, state]


def ops_checks() -> list:
    """The checks the sensors report, declared on every job's gold asset (also runnable)."""
    return [check for spec in registry().values() for check in _checks_for(spec)]


# -- state size -------------------------------------------------------------------------------

def _open_level(cfg, job: str, open_rows: list[dict] | None = None) -> str:
    key = f"state:{job}:state_size"
    rows = alerts.open_alerts(cfg, job) if open_rows is None else open_rows
    row = next((r for r in rows if r["dedup_key"] == key), None)
    return row["severity"] if row else "ok"


def state_evaluation(cfg: TidemarkConfig, spec: JobSpec, readings=None,
                     verdict=None) -> AssetCheckEvaluation:
    readings = history(cfg, spec.name) if readings is None else readings
    if not readings:
        return AssetCheckEvaluation(asset_key=_gold(spec), check_name=STATE_CHECK, passed=True,
                                    metadata={"why": MetadataValue.text("no state readings yet")})
    latest = readings[-1]
    name, why = verdict or level(latest, spec.thresholds, _open_level(cfg, spec.name))
    return AssetCheckEvaluation(
        asset_key=_gold(spec), check_name=STATE_CHECK, passed=name == "ok",
        severity=AssetCheckSeverity.ERROR if name == "critical" else AssetCheckSeverity.WARN,
        metadata={"state_rows": MetadataValue.int(latest.rows),
                  "state_memory_bytes": MetadataValue.int(latest.memory_bytes),
                  "state_disk_bytes": MetadataValue.int(latest.disk_bytes),
                  "level": MetadataValue.text(name), "why": MetadataValue.text(why)})


@sensor(name="state_size_sensor", minimum_interval_seconds=60,
        default_status=DefaultSensorStatus.RUNNING,
        description="Per job and stateful operator: state rows, memory and disk against the "
                    "job's thresholds (with hysteresis), and growth that will reach critical soon.")
def state_size_sensor(context: SensorEvaluationContext, tidemark: TidemarkResource):
    cfg = tidemark.config()
    seen = json.loads(context.cursor or "{}")
    events = []
    open_rows = alerts.open_alerts(cfg)
    for spec in registry().values():
        readings = history(cfg, spec.name)
        if not readings:
            continue
        latest = readings[-1]
        limits = spec.thresholds
        if seen.get(spec.name) != latest.batch_id:
            seen[spec.name] = latest.batch_id
            events.append(AssetObservation(asset_key=_gold(spec), metadata={
                "state_rows": MetadataValue.int(latest.rows),
                "state_memory_bytes": MetadataValue.int(latest.memory_bytes),
                "state_disk_bytes": MetadataValue.int(latest.disk_bytes),
                "batch_id": MetadataValue.int(latest.batch_id),
                **{f"rows.{o.operator}": MetadataValue.int(o.rows) for o in latest.operators},
            }))
        verdict, why = level(latest, limits, _open_level(cfg, spec.name, open_rows))
        events.append(state_evaluation(cfg, spec, readings, (verdict, why)))
        firing = {}
        if verdict != "ok":
            firing["state_size"] = (verdict, f"{spec.name}: {why}")
        trend = growth(readings, limits)
        horizon = cfg.ops.growth_horizon_hours
        if verdict != "critical" and trend and trend.hours_to_critical is not None \
                and trend.hours_to_critical <= horizon:
            firing["state_growth"] = ("warning", (
                f"{spec.name}: state grows {trend.rows_per_hour:,.0f} rows/h and reaches "
                f"critical ({limits.critical_rows:,} rows) in {trend.hours_to_critical:.1f} h"))
        _sync_alerts(cfg, spec.name, "state", firing, f"{spec.name}: {why}", open_rows)
    alerts.deliver(cfg)
    return SensorResult(asset_events=events, cursor=json.dumps(seen, sort_keys=True))


# -- restarts ---------------------------------------------------------------------------------

@sensor(name="streaming_restart_sensor", job_name=CONTINUOUS_JOB,
        minimum_interval_seconds=30, default_status=DefaultSensorStatus.RUNNING,
        description="Restarts a failed streaming run with backoff; after the last attempt, a "
                    "critical alert.")
def streaming_restart_sensor(context: SensorEvaluationContext, tidemark: TidemarkResource):
    cfg = tidemark.config()
    handled = set(json.loads(context.cursor or "[]"))
    requests, now = [], time.time()
    failed = context.instance.get_runs(
        filters=RunsFilter(job_name=CONTINUOUS_JOB,
                           statuses=[DagsterRunStatus.FAILURE]), limit=50)
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
        requests.append(RunRequest(
            run_key=f"restart:{run.run_id}", job_name=run.job_name, run_config=run.run_config,
            tags={ATTEMPT_TAG: str(attempt),
                  RESTART_OF_TAG: run.tags.get(RESTART_OF_TAG, run.run_id)}))
        handled.add(run.run_id)
    return SensorResult(run_requests=requests, cursor=json.dumps(sorted(handled)[-500:]))

