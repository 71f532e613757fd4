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

from streaming_jobs import ops_tables
from streaming_jobs.config import TidemarkConfig
from streaming_jobs.operations import alerts
from streaming_jobs.registry import registry

from orchestration import keys
from orchestration.metadata import readable_bytes


def _latest_by_job(rows: list[dict], order) -> dict[str, dict]:
    latest: dict[str, dict] = {}
    for row in rows:
        if row["job"] not in latest or order(row) > order(latest[row["job"]]):
            latest[row["job"]] = row
    return latest


def recon_summaries(cfg: TidemarkConfig) -> dict[str, dict]:
    """The latest ``recon_summary`` row per job (empty before the first reconciliation)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    path = cfg.paths.dbt_table("recon", "recon_summary")
    if not (path / "_delta_log").is_dir():
        return {}
    try:
        table = DeltaTable(str(path))
    except TableNotFoundError:
        # a log with no commit yet: the first reconciliation is creating the table right now
        return {}
    rows = table.to_pyarrow_dataset().to_table(
        columns=["job", "reconciled_at", "rows_compared", "unexplained_rows"]).to_pylist()
    return _latest_by_job(rows, lambda r: r["reconciled_at"])


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
        cfg, "stream_progress", columns=["job", "batch_id", "ts", "watermark", "state_rows",
                                         "state_memory_bytes", "state_disk_bytes"],
        where=f"job in ({', '.join(map(ops_tables.literal, jobs))})" if jobs else "false")
    last = _latest_by_job(progress, lambda r: (r["ts"], r["batch_id"]))
    recon = recon_summaries(cfg)
    open_by_job: dict[str, int] = {}
    open_rows = alerts.open_alerts(cfg)
    for row in open_rows:
        open_by_job[row["job"]] = open_by_job.get(row["job"], 0) + 1
    lines = ["| job | state | watermark | watermark lag | last batch | batch age | reconciled | "
             "unexplained | open alerts |", "|---|---:|---|---:|---:|---:|---|---:|---:|"]
    batch_ages, lags = [], []
    for name in jobs:
        row, rec = last.get(name, {}), recon.get(name, {})
        batch_age, lag = _age(now, row.get("ts")), _age(now, row.get("watermark"))
        batch_ages += [batch_age] if batch_age is not None else []
        lags += [lag] if lag is not None else []
        state = (f"{row['state_rows']:,} rows, "
                 f"{readable_bytes(max(row['state_memory_bytes'] or 0, row['state_disk_bytes'] or 0))}"
                 if row else "never ran")
        lines.append(
            f"| {name} | {state} | {row.get('watermark') or '-'} | {_duration(lag)} | "
            f"{row.get('batch_id', '-')} | {_duration(batch_age)} | "
            f"{rec['reconciled_at'] if rec else 'not yet'} | "
            f"{rec['unexplained_rows'] if rec else '-'} | {open_by_job.get(name, 0)} |")
    totals = {
        "job_count": len(jobs),
        "state_rows": sum((r["state_rows"] or 0) for r in last.values()),
        "open_alerts": len(open_rows),
        "unexplained_rows": sum(r["unexplained_rows"] or 0 for r in recon.values()),
        "rows_compared": sum(r["rows_compared"] or 0 for r in recon.values()),
        "max_batch_age_seconds": max(batch_ages) if batch_ages else 0.0,
        "max_watermark_lag_seconds": max(lags) if lags else 0.0,
    }
    return "\n".join(lines), totals


def ops_observations(cfg: TidemarkConfig) -> list[dg.AssetObservation]:
    table, totals = overview(cfg)
    numeric = {k: (dg.MetadataValue.float(round(v, 1)) if isinstance(v, float)
                   else dg.MetadataValue.int(v)) for k, v in totals.items()}
    events = [dg.AssetObservation(asset_key=keys.OVERVIEW, metadata={
        "jobs": dg.MetadataValue.md(table), **numeric})]
    incidents = alerts.load(cfg)
    for key, name, extra in (
            (keys.STREAM_PROGRESS, "stream_progress", {}),
            (keys.STREAM_FAILURES, "stream_failures", {}),
            (keys.ALERTS, "alerts", {
                "open_alerts": dg.MetadataValue.int(sum(r["resolved_at"] is None
                                                        for r in incidents)),
                "notifications_pending": dg.MetadataValue.int(
                    sum(alerts.owed(r) is not None for r in incidents))})):
        version = ops_tables.version(cfg, name)
        if version is None:
            continue
        rows = len(ops_tables.read(cfg, name, columns=["job"]))
        events.append(dg.AssetObservation(asset_key=key, metadata={
            "rows": dg.MetadataValue.int(rows), "delta_version": dg.MetadataValue.int(version),
            "table_path": dg.MetadataValue.path(str(ops_tables.path(cfg, name))), **extra}))
    return events
