"""What tidemark reports to Dagster about a streaming run, as metadata (plotted when numeric).

A run's metadata says what it did (rows in and out, late drops, batches) and where its query
stands after it (state and watermark are the query's current ones, even when the run found
nothing new); `state_markdown` adds the job's state per operator, read from its checkpoint.
"""

from __future__ import annotations

from datetime import datetime, timezone

from dagster import MetadataValue

from streaming_jobs.runtime.runner import RunMetrics


def readable_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1024
    return f"{n} B"


# How a continuous run's report ends when its query read nothing new and its source has nothing
# waiting: what `tidemark live` waits for (batches alone do not tell: an OPTIMIZE of bronze makes
# the jobs reading it run empty batches)
IDLE = ", 0 rows read, caught up"


def continuous_description(run_id: str, new_batches: int, new_rows: int, caught_up: bool) -> str:
    return f"continuous run {run_id[:8]}: {new_batches} new batches, {new_rows:,} rows read" + (
        ", caught up" if caught_up else ""
    )


def run_metadata(metrics: RunMetrics, table_path: str) -> dict:
    """A run's metadata: what it did, and where the query stands (state and watermark are the
    query's current ones even when the run found nothing new)."""
    lag = None
    if metrics.watermark is not None:
        lag = (datetime.now(timezone.utc).replace(tzinfo=None) - metrics.watermark).total_seconds()
    return {
        "table_path": MetadataValue.path(table_path),
        "input_rows": MetadataValue.int(metrics.input_rows),
        "output_rows": MetadataValue.int(metrics.output_rows),
        "quarantined_rows": MetadataValue.int(metrics.quarantined_rows),
        "state_rows": MetadataValue.int(metrics.state_rows),
        "state_memory_bytes": MetadataValue.int(metrics.state_memory_bytes),
        "state_disk_bytes": MetadataValue.int(metrics.state_disk_bytes),
        "late_rows_dropped": MetadataValue.int(metrics.late_rows_dropped),
        "state_size": MetadataValue.text(
            f"{metrics.state_rows:,} rows, {readable_bytes(metrics.state_memory_bytes)} in "
            f"memory, {readable_bytes(metrics.state_disk_bytes)} on disk"
        ),
        "watermark": MetadataValue.text(
            str(metrics.watermark) if metrics.watermark else "none yet"
        ),
        **(
            {"watermark_lag_seconds": MetadataValue.float(round(lag, 1))} if lag is not None else {}
        ),
        "batches": MetadataValue.int(metrics.batches),
        "checkpoint_batch_id": MetadataValue.int(
            -1 if metrics.checkpoint_batch_id is None else metrics.checkpoint_batch_id
        ),
        "duration_seconds": MetadataValue.float(metrics.duration_seconds),
    }


def state_markdown(spark, cfg, job: str) -> str:
    """The job's state per operator, read from its checkpoint (`tidemark state JOB` in full)."""
    from streaming_jobs.operations.state import inspect

    try:
        operators = inspect(spark, cfg, job, top=3)
    except Exception as exc:  # noqa: BLE001 - metadata must not fail the materialization
        return f"state could not be read: {type(exc).__name__}: {str(exc)[:300]}"
    if not operators:
        return "no state (stateless, or not run yet)"
    lines = [
        "| operator | store / variables | rows | partitions | batches | largest keys (bytes) |",
        "|---|---|---:|---:|---|---|",
    ]
    for op in operators:
        keys = "<br>".join(f"`{k}` ({b:,})" for k, b in op.largest)
        lines.append(
            f"| {op.operator_id} {op.operator} | {', '.join(op.variables) or op.store} "
            f"| {op.rows:,} | {op.partitions} | {op.min_batch}..{op.max_batch} | {keys} |"
        )
    return "\n".join(lines)
