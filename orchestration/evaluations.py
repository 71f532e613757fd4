"""The verdicts the ops sensors and checks share: a job's checkpoint health and state size.

Each is computed from checkpoint files and the ops tables (no JVM) and turned into an asset
check evaluation on the job's gold asset (``checkpoint_health``, ``state_size``); `sync_alerts`
keeps one alert per firing kind and resolves the ones that stopped firing.
"""

from __future__ import annotations

import dagster as dg

from streaming_jobs.config import TidemarkConfig
from streaming_jobs.operations import alerts
from streaming_jobs.operations.health import CRITICAL, Finding, check
from streaming_jobs.operations.state import Reading, history, level
from streaming_jobs.spec import JobSpec

from orchestration import keys

CHECKPOINT_CHECK = "checkpoint_health"
STATE_CHECK = "state_size"


def sync_alerts(cfg: TidemarkConfig, job: str, prefix: str, firing: dict[str, tuple[str, str]],
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


def firing_kinds(findings: list[Finding]) -> dict[str, tuple[str, str]]:
    """One alert per kind: (severity of the first, messages of the kind joined)."""
    firing: dict[str, tuple[str, str]] = {}
    for f in findings:
        severity, message = firing.get(f.kind, (f.severity, ""))
        firing[f.kind] = (severity, f"{message}; {f.message}" if message else f.message)
    return firing


def checkpoint_health(cfg: TidemarkConfig, spec: JobSpec):
    """The job's checkpoint findings and their asset check evaluation."""
    findings = check(cfg, spec.name, spec.sources)
    critical = any(f.severity == CRITICAL for f in findings)
    evaluation = dg.AssetCheckEvaluation(
        asset_key=keys.gold(spec.name), check_name=CHECKPOINT_CHECK, passed=not findings,
        severity=dg.AssetCheckSeverity.ERROR if critical else dg.AssetCheckSeverity.WARN,
        metadata={"findings": dg.MetadataValue.int(len(findings)),
                  "details": dg.MetadataValue.md("\n".join(
                      f"- **{f.kind}** ({f.severity}): {f.message}" for f in findings)
                      or "checkpoint healthy")})
    return findings, evaluation


def open_level(cfg: TidemarkConfig, job: str, open_rows: list[dict] | None = None) -> str:
    """The state-size level the job's open alert holds (for hysteresis), or 'ok'."""
    key = f"state:{job}:state_size"
    rows = alerts.open_alerts(cfg, job) if open_rows is None else open_rows
    row = next((r for r in rows if r["dedup_key"] == key), None)
    return row["severity"] if row else "ok"


def state_evaluation(cfg: TidemarkConfig, spec: JobSpec, readings: list[Reading] | None = None,
                     verdict: tuple[str, str] | None = None) -> dg.AssetCheckEvaluation:
    readings = history(cfg, spec.name) if readings is None else readings
    if not readings:
        return dg.AssetCheckEvaluation(
            asset_key=keys.gold(spec.name), check_name=STATE_CHECK, passed=True,
            metadata={"why": dg.MetadataValue.text("no state readings yet")})
    latest = readings[-1]
    name, why = verdict or level(latest, spec.thresholds, open_level(cfg, spec.name))
    return dg.AssetCheckEvaluation(
        asset_key=keys.gold(spec.name), check_name=STATE_CHECK, passed=name == "ok",
        severity=dg.AssetCheckSeverity.ERROR if name == "critical" else dg.AssetCheckSeverity.WARN,
        metadata={"state_rows": dg.MetadataValue.int(latest.rows),
                  "state_memory_bytes": dg.MetadataValue.int(latest.memory_bytes),
                  "state_disk_bytes": dg.MetadataValue.int(latest.disk_bytes),
                  "level": dg.MetadataValue.text(name), "why": dg.MetadataValue.text(why)})
