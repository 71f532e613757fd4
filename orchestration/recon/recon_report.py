"""The reconciliation classes, and what one recon table says, as Dagster metadata.

A recon model's materialization carries its class counts as numeric metadata (Dagster plots
them over time, run after run) and as a markdown table. The counts are read from the recon
table with delta-rs: the reconciliation run itself starts no JVM.
"""

from __future__ import annotations

from collections import Counter

from dagster import MetadataValue

from streaming_jobs.core import locations
from streaming_jobs.core.config import TidemarkConfig


def _classes() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The recon classes, from their one list: dbt_project.yml's var ``recon_classes``."""
    import yaml

    from orchestration.recon.project import DBT_PROJECT_DIR

    declared = yaml.safe_load((DBT_PROJECT_DIR / "dbt_project.yml").read_text())["vars"]
    return (
        tuple(declared["recon_classes"]["explained"]),
        tuple(declared["recon_classes"]["unexplained"]),
    )


EXPLAINED, UNEXPLAINED = _classes()
RECON_CLASSES = EXPLAINED + UNEXPLAINED


def late_events(row: dict, between: str = "/") -> str:
    """Late events replayed / reported, and how many replayed ones were read by batches whose
    own report was lost (re-run after a stop or a crash; int_late_events)."""
    text = f"{row['late_events_replayed']:,}{between}{row['late_events_reported']:,}"
    lost = row.get("late_events_report_lost") or 0
    return text + (f" ({lost:,} in lost reports)" if lost else "")


def recon_counts(cfg: TidemarkConfig, job: str, table=None) -> dict[str, int]:
    """Rows per class of ``job``'s recon table (``table``: another place of it, a shadow's)."""
    table = locations.delta_table(table or cfg.paths.dbt_table("recon", f"recon_{job}"))
    classes = table.to_pyarrow_dataset().to_table(columns=["recon_class"]).column(0)
    found = Counter(classes.to_pylist())
    return {c: int(found.get(c, 0)) for c in RECON_CLASSES}


def recon_metadata(counts: dict[str, int]) -> dict[str, MetadataValue]:
    compared = sum(counts.values())
    unexplained = sum(counts[c] for c in UNEXPLAINED)
    lines = ["| class | rows | share | explained |", "|---|---:|---:|---|"]
    for c in RECON_CLASSES:
        share = counts[c] / compared if compared else 0.0
        lines.append(
            f"| {c} | {counts[c]:,} | {share:.1%} | {'no' if c in UNEXPLAINED else 'yes'} |"
        )
    return {
        "rows_compared": MetadataValue.int(compared),
        "unexplained_rows": MetadataValue.int(unexplained),
        **{f"{c}_rows": MetadataValue.int(counts[c]) for c in RECON_CLASSES},
        "recon_classes": MetadataValue.md("\n".join(lines)),
    }


def summary_metadata(cfg: TidemarkConfig) -> dict[str, MetadataValue]:
    """``recon_summary``'s latest run: a row per job and the totals (plotted run after run)."""

    path = cfg.paths.dbt_table("recon", "recon_summary")
    rows = locations.delta_table(path).to_pyarrow_table().to_pylist()
    if not rows:
        return {}
    # this run's rows: one invocation id per dbt invocation, the newest reconciled
    newest = max(rows, key=lambda r: r["reconciled_at"])["invocation_id"]
    latest = sorted((r for r in rows if r["invocation_id"] == newest), key=lambda r: r["job"])
    lines = [
        "| job | compared | match | window_open | late_dropped | unexplained | "
        "late events (replayed / reported) |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in latest:
        lines.append(
            f"| {r['job']} | {r['rows_compared']:,} | {r['match_rows']:,} | "
            f"{r['window_open_rows']:,} | {r['late_dropped_rows']:,} | "
            f"{r['unexplained_rows']:,} | {late_events(r, ' / ')} |"
        )
    compared = sum(r["rows_compared"] for r in latest)
    unexplained = sum(r["unexplained_rows"] for r in latest)
    return {
        "reconciliation": MetadataValue.text(
            f"{compared:,} rows compared, {unexplained:,} unexplained"
        ),
        "rows_compared": MetadataValue.int(compared),
        "unexplained_rows": MetadataValue.int(unexplained),
        "jobs_reconciled": MetadataValue.int(len(latest)),
        "per_job": MetadataValue.md("\n".join(lines)),
    }


def run_metadata(status) -> dict[str, MetadataValue]:
    """The latest reconciliation run (`recon_runs.ReconStatus`), whatever its outcome: what the
    ``recon_summary`` asset shows when dbt skipped the summary table."""
    if not status.ran:
        return {"reconciliation": MetadataValue.text("no reconciliation has run yet")}
    problems = status.problems()
    lines = ["| job | status | compared | unexplained | failed checks |", "|---|---|---:|---:|---|"]
    for row in sorted(status.latest_run, key=lambda r: r["job"] or ""):
        compared, unexplained = row["rows_compared"], row["unexplained_rows"]
        lines.append(
            f"| {row['job'] or '(run)'} | {row['status']} | "
            f"{'-' if compared is None else f'{compared:,}'} | "
            f"{'-' if unexplained is None else f'{unexplained:,}'} | "
            f"{'; '.join(row['failed_checks'] or []) or row['message'] or ''} |"
        )
    out = {
        "reconciliation": MetadataValue.text(
            ("FAILED: " + " | ".join(problems))
            if problems
            else f"{status.compared:,} rows compared, 0 unexplained"
        ),
        "run_status": MetadataValue.text(status.run_status),
        "rows_compared": MetadataValue.int(status.compared),
        "jobs_failed": MetadataValue.int(
            sum(r["job"] is not None and r["status"] != "passed" for r in status.latest_run)
        ),
        "per_job": MetadataValue.md("\n".join(lines)),
    }
    # a count that leaves a job out is no point to plot: said instead of a number that reads low
    if status.unexplained is None:
        out["unexplained_rows_not_counted"] = MetadataValue.text(", ".join(status.uncounted))
    else:
        out["unexplained_rows"] = MetadataValue.int(status.unexplained)
    return out
