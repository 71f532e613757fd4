"""Every job in one place, and the ops tables' own state, as Dagster observations.

``ops/overview`` gets one observation per `ops_overview_sensor` tick: a markdown table with a
row per job (state, watermark and its lag behind the wall clock, the last batch and its age, the
latest reconciliation, open alerts) and the totals as numeric metadata, which Dagster plots.
``ops/stream_progress``, ``ops/stream_failures`` and ``ops/alerts`` get their row counts and
versions. Everything is read with delta-rs: no JVM.
"""

from __future__ import annotations

from datetime import datetime, timezone

import dagster as dg

from streaming_jobs.storage import ops_tables
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.operations import alerts
from streaming_jobs.storage.registry import registry

from orchestration.lib import keys

from orchestration.recon import recon_runs
from orchestration.lib.metadata import readable_bytes


# Spark's watermark before any event passed it is 1970-01-01 00:00:00
NO_WATERMARK = datetime(1970, 1, 2, tzinfo=timezone.utc)


def _latest_by_job(rows: list[dict], order) -> dict[str, dict]:
    latest: dict[str, dict] = {}
    for row in rows:
        if row["job"] not in latest or order(row) > order(latest[row["job"]]):
            latest[row["job"]] = row
    return latest


def _watermark(value: datetime | None) -> datetime | None:
    """The watermark, or None before the job's first event passed it (Spark reports the epoch:
    a lag of 56 years is no lag, and is neither shown nor plotted)."""
    if value is None:
        return None
    value = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    return None if value <= NO_WATERMARK else value


def _age(now: datetime, then: datetime | None) -> float | None:
    if then is None:
        return None
    then = then if then.tzinfo else then.replace(tzinfo=timezone.utc)
    return (now - then).total_seconds()


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if abs(seconds) >= size:
            return f"{seconds / size:,.1f} {unit}"
    return f"{seconds:,.0f} s"


def overview(cfg: TidemarkConfig, now: datetime | None = None) -> tuple[str, dict]:
    """The per-job markdown table and the totals (a pure function of the ops tables)."""
    now = now or datetime.now(timezone.utc)
    jobs = registry()
    progress = ops_tables.read(
        cfg,
        "stream_progress",
        columns=[
            "job",
            "batch_id",
            "ts",
            "watermark",
            "state_rows",
            "state_memory_bytes",
            "state_disk_bytes",
        ],
        where=f"job in ({', '.join(map(ops_tables.literal, jobs))})" if jobs else "false",
    )
    last = _latest_by_job(progress, lambda r: (r["ts"], r["batch_id"]))
    reconciled = recon_runs.status(cfg)
    recon = reconciled.jobs
    open_by_job: dict[str, int] = {}
    open_rows = alerts.open_alerts(cfg)
    for row in open_rows:
        open_by_job[row["job"]] = open_by_job.get(row["job"], 0) + 1
    lines = [
        "| job | state | watermark | watermark lag | last batch | batch age | reconciled | "
        "unexplained | open alerts |",
        "|---|---:|---|---:|---:|---:|---|---:|---:|",
    ]
    batch_ages, lags = [], []
    for name in jobs:
        row, rec = last.get(name, {}), recon.get(name, {})
        watermark = _watermark(row.get("watermark"))
        batch_age, lag = _age(now, row.get("ts")), _age(now, watermark)
        batch_ages += [batch_age] if batch_age is not None else []
        lags += [lag] if lag is not None else []
        state = (
            f"{row['state_rows']:,} rows, "
            f"{readable_bytes(max(row['state_memory_bytes'] or 0, row['state_disk_bytes'] or 0))}"
            if row
            else "never ran"
        )
        lines.append(
            f"| {name} | {state} | {watermark or ('none yet' if row else '-')} | "
            f"{_duration(lag)} | {row.get('batch_id', '-')} | {_duration(batch_age)} | "
            f"{_reconciled(rec)} | "
            f"{'-' if rec.get('unexplained_rows') is None else rec['unexplained_rows']} | "
            f"{open_by_job.get(name, 0)} |"
        )
    totals = {
        "job_count": len(jobs),
        "state_rows": sum((r["state_rows"] or 0) for r in last.values()),
        "open_alerts": len(open_rows),
    }
    if reconciled.ran:  # before the first reconciliation there is nothing to count, not 0
        if reconciled.unexplained is not None:  # not a total that leaves a job out
            totals["unexplained_rows"] = reconciled.unexplained
        totals.update(
            rows_compared=reconciled.compared,
            reconciliation_failed_jobs=sum(
                r["status"] != recon_runs.PASSED for r in recon.values()
            ),
        )
    # (no batch or no watermark yet: nothing to plot, rather than a false 0)
    if batch_ages:
        totals["max_batch_age_seconds"] = max(batch_ages)
    if lags:
        totals["max_watermark_lag_seconds"] = max(lags)
    return "\n".join(lines), totals


def _reconciled(row: dict) -> str:
    if not row:
        return "not yet"
    when = f"{row['finished_at']:%Y-%m-%d %H:%M:%S}"
    if row["status"] == recon_runs.PASSED and not row["unexplained_rows"]:
        return when
    return f"{when} **FAILED** ({row['status']})"


def ops_observations(cfg: TidemarkConfig) -> list[dg.AssetObservation]:
    table, totals = overview(cfg)
    numeric = {
        k: (
            dg.MetadataValue.float(round(v, 1)) if isinstance(v, float) else dg.MetadataValue.int(v)
        )
        for k, v in totals.items()
    }
    events = [
        dg.AssetObservation(
            asset_key=keys.OVERVIEW, metadata={"jobs": dg.MetadataValue.md(table), **numeric}
        )
    ]
    incidents = alerts.load(cfg)
    for key, name, extra in (
        (keys.STREAM_PROGRESS, "stream_progress", {}),
        (keys.STREAM_FAILURES, "stream_failures", {}),
        (
            keys.ALERTS,
            "alerts",
            {
                "open_alerts": dg.MetadataValue.int(
                    sum(r["resolved_at"] is None for r in incidents)
                ),
                "notifications_pending": dg.MetadataValue.int(
                    sum(alerts.owed(r) is not None for r in incidents)
                ),
            },
        ),
    ):
        version = ops_tables.version(cfg, name)
        if version is None:
            continue
        rows = len(ops_tables.read(cfg, name, columns=["job"]))
        events.append(
            dg.AssetObservation(
                asset_key=key,
                metadata={
                    "rows": dg.MetadataValue.int(rows),
                    "delta_version": dg.MetadataValue.int(version),
                    "table_path": dg.MetadataValue.path(str(ops_tables.path(cfg, name))),
                    **extra,
                },
            )
        )
    return events
