"""The verdicts the ops sensors and checks share: a job's checkpoint health and state size.

Each is computed from checkpoint files and the ops tables (no JVM) and turned into an asset
check evaluation on the job's gold asset (``checkpoint_health``, ``state_size``); `sync_alerts`
keeps one alert per firing kind and resolves the ones that stopped firing.
"""

from __future__ import annotations

import shutil

import dagster as dg

from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.operations import alerts
from streaming_jobs.operations.health import CRITICAL, Finding, check
from streaming_jobs.operations.savepoints import mend_corrupt
from streaming_jobs.operations.state import Reading, history, level
from streaming_jobs.spec import JobSpec

from orchestration.lib import keys

CHECKPOINT_CHECK = "checkpoint_health"
STATE_CHECK = "state_size"


def sync_alerts(
    cfg: TidemarkConfig,
    job: str,
    prefix: str,
    firing: dict[str, tuple[str, str]],
    resolution: str,
    open_rows: list[dict],
) -> list[alerts.Change]:
    """Open (or refresh) an alert per firing kind; resolve the prefix's other open alerts."""
    changes = []
    for kind, (severity, message) in firing.items():
        changes.append(
            alerts.raise_alert(
                cfg,
                job=job,
                kind=kind,
                severity=severity,
                message=message,
                dedup_key=f"{prefix}:{job}:{kind}",
            )
        )
    for row in open_rows:
        if (
            row["job"] == job
            and row["dedup_key"].startswith(f"{prefix}:{job}:")
            and row["dedup_key"].rsplit(":", 1)[1] not in firing
        ):
            alerts.resolve(cfg, row["dedup_key"], resolution)
    return changes


def sync_incidents(
    cfg: TidemarkConfig,
    prefix: str,
    kind: str,
    firing: dict[str, str],
    resolution: str,
    open_rows: list[dict],
) -> None:
    """A critical alert per subject of ``firing`` (subject -> message) under ``prefix``; the
    prefix's open alerts whose subject no longer fires are resolved."""
    for subject, message in firing.items():
        alerts.raise_alert(
            cfg,
            job=subject,
            kind=kind,
            severity=CRITICAL,
            message=message,
            dedup_key=f"{prefix}:{subject}:{kind}",
        )
    for row in open_rows:
        if row["dedup_key"].startswith(f"{prefix}:") and row["job"] not in firing:
            alerts.resolve(cfg, row["dedup_key"], resolution)


def sync_load_problems(cfg: TidemarkConfig, problems, open_rows: list[dict]) -> None:
    """A critical ``job_file`` alert per file left out of the code location; resolved once the
    file loads again (or is removed)."""
    messages: dict[str, list[str]] = {}
    for problem in problems:
        messages.setdefault(problem.subject, []).append(str(problem))
    sync_incidents(
        cfg,
        "load",
        "job_file",
        {
            subject: f"left out of the code location (its jobs do not run): {'; '.join(found)}"
            for subject, found in messages.items()
        },
        "the file loads again",
        open_rows,
    )


def sync_setting_problems(
    cfg: TidemarkConfig, problems: dict[str, str], open_rows: list[dict]
) -> None:
    """A critical ``setting`` alert per malformed variable (it runs with its default)."""
    sync_incidents(
        cfg,
        "setting",
        "setting",
        {
            variable: f"{message}; running with its default until it is fixed (then reload the "
            "code location)"
            for variable, message in problems.items()
        },
        "the setting is valid again",
        open_rows,
    )


def sync_disk_space(cfg: TidemarkConfig, open_rows: list[dict]) -> None:
    """A critical ``disk_space`` alert while the data root's disk has less free space than
    ``TIDEMARK_MIN_FREE_GB`` (checkpoints, Delta commits and the alert outbox all need it)."""
    # the data root's disk; with the data root on an object store, this machine's working
    # folder (logs, Dagster's home, the alert outbox)
    local = cfg.work_root
    root = local if local.exists() else local.parent
    free_gb = shutil.disk_usage(root).free / 1024**3
    firing = {}
    if free_gb < cfg.ops.min_free_gb:
        firing["data_root"] = (
            f"{free_gb:.2f} GB free on the disk of {local} (below "
            f"TIDEMARK_MIN_FREE_GB={cfg.ops.min_free_gb:g}): free space, or "
            "move the data root, before commits start to fail"
        )
    sync_incidents(cfg, "disk", "disk_space", firing, "free space is back", open_rows)


def firing_kinds(findings: list[Finding]) -> dict[str, tuple[str, str]]:
    """One alert per kind: (severity of the first, messages of the kind joined)."""
    firing: dict[str, tuple[str, str]] = {}
    for f in findings:
        severity, message = firing.get(f.kind, (f.severity, ""))
        firing[f.kind] = (severity, f"{message}; {f.message}" if message else f.message)
    return firing


def checkpoint_health(cfg: TidemarkConfig, spec: JobSpec):
    """The job's checkpoint findings and their asset check evaluation; a broken checkpoint's
    findings end with what mends it (`savepoints.mend_corrupt`)."""
    findings = mend_corrupt(cfg, spec.name, check(cfg, spec.name, spec.sources))
    critical = any(f.severity == CRITICAL for f in findings)
    evaluation = dg.AssetCheckEvaluation(
        asset_key=keys.gold(spec.name),
        check_name=CHECKPOINT_CHECK,
        passed=not findings,
        severity=dg.AssetCheckSeverity.ERROR if critical else dg.AssetCheckSeverity.WARN,
        metadata={
            "findings": dg.MetadataValue.int(len(findings)),
            "details": dg.MetadataValue.md(
                "\n".join(f"- **{f.kind}** ({f.severity}): {f.message}" for f in findings)
                or "checkpoint healthy"
            ),
        },
    )
    return findings, evaluation


def open_level(cfg: TidemarkConfig, job: str, open_rows: list[dict] | None = None) -> str:
    """The state-size level the job's open alert holds (for hysteresis), or 'ok'."""
    key = f"state:{job}:state_size"
    rows = alerts.open_alerts(cfg, job) if open_rows is None else open_rows
    row = next((r for r in rows if r["dedup_key"] == key), None)
    return row["severity"] if row else "ok"


def state_evaluation(
    cfg: TidemarkConfig,
    spec: JobSpec,
    readings: list[Reading] | None = None,
    verdict: tuple[str, str] | None = None,
) -> dg.AssetCheckEvaluation:
    readings = history(cfg, spec.name) if readings is None else readings
    if not readings:
        return dg.AssetCheckEvaluation(
            asset_key=keys.gold(spec.name),
            check_name=STATE_CHECK,
            passed=True,
            metadata={"why": dg.MetadataValue.text("no state readings yet")},
        )
    latest = readings[-1]
    name, why = verdict or level(latest, spec.thresholds, open_level(cfg, spec.name))
    return dg.AssetCheckEvaluation(
        asset_key=keys.gold(spec.name),
        check_name=STATE_CHECK,
        passed=name == "ok",
        severity=dg.AssetCheckSeverity.ERROR if name == "critical" else dg.AssetCheckSeverity.WARN,
        metadata={
            "state_rows": dg.MetadataValue.int(latest.rows),
            "state_memory_bytes": dg.MetadataValue.int(latest.memory_bytes),
            "state_disk_bytes": dg.MetadataValue.int(latest.disk_bytes),
            "level": dg.MetadataValue.text(name),
            "why": dg.MetadataValue.text(why),
        },
    )


def expectation_check_name(e) -> str:
    return f"expect_{e.name}"


def expectation_evaluation(asset_key: dg.AssetKey, e, rows: list[dict]) -> dg.AssetCheckEvaluation:
    """A declared expectation's check: passed when the latest batch has no failing row.

    ``rows``: its recorded batches, oldest first (`streaming_jobs.storage.expectations.latest`)."""
    last = rows[-1] if rows else None
    failed = last["rows_failed"] if last else 0
    checked = last["rows_checked"] if last else 0
    recent = sum(r["rows_failed"] for r in rows)
    what = {
        "warn": "kept and counted",
        "quarantine": "sent to quarantine",
        "fail": "stopped the batch",
    }[e.action]
    return dg.AssetCheckEvaluation(
        asset_key=asset_key,
        check_name=expectation_check_name(e),
        passed=failed == 0,
        severity=dg.AssetCheckSeverity.ERROR if e.action == "fail" else dg.AssetCheckSeverity.WARN,
        description=(
            f"{e.rule} ({e.action})"
            if last is None
            else f"batch {last['batch_id']}: {failed:,} of {checked:,} rows failed "
            f"{e.rule} ({what})"
        ),
        metadata={
            "rule": dg.MetadataValue.text(e.rule),
            "action": dg.MetadataValue.text(e.action),
            "batch_id": dg.MetadataValue.int(last["batch_id"] if last else -1),
            "rows_checked": dg.MetadataValue.int(checked),
            "rows_failed": dg.MetadataValue.int(failed),
            "failed_share": dg.MetadataValue.float(failed / checked if checked else 0.0),
            f"rows_failed_last_{len(rows)}_batches": dg.MetadataValue.int(recent),
        },
    )
