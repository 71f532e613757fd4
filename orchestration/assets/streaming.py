"""Streaming assets, built from the registries: ``bronze/<stream>`` and ``gold/<job>``.

Each materialization runs the query incrementally (``availableNow``): it processes everything
that arrived since the last one, commits its checkpoint and stops, and its metadata says what it
did (Dagster plots the numeric values over time).
"""


from datetime import datetime, timedelta, timezone

from dagster import (AssetKey, AssetsDefinition, AssetSpec, FreshnessPolicy, MaterializeResult,
                     MetadataValue, asset)

from streaming_jobs.jobs import registry, streams
from streaming_jobs.jobs.spec import JobSpec
from streaming_jobs.runner import RunMetrics, run_bronze, run_job

from orchestration.resources import TidemarkResource, TidemarkSparkResource

STREAMING_GROUP = "streaming"

STREAM_PROGRESS = AssetSpec(
    key=AssetKey(["ops", "stream_progress"]),
    description="One row per micro-batch of every streaming query, written by the progress "
                "listener as the streaming assets run.",
    group_name="ops",
    kinds={"delta"},
)


BRONZE_FRESHNESS = FreshnessPolicy.time_window(fail_window=timedelta(minutes=30),
                                               warn_window=timedelta(minutes=10))


def readable_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1024
    return f"{n} B"


def job_freshness(spec: JobSpec) -> FreshnessPolicy:
    warn, fail = spec.freshness_seconds
    return FreshnessPolicy.time_window(fail_window=timedelta(seconds=fail),
                                       warn_window=timedelta(seconds=warn))


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
            f"memory, {readable_bytes(metrics.state_disk_bytes)} on disk"),
        "watermark": MetadataValue.text(str(metrics.watermark) if metrics.watermark
                                        else "none yet"),
        **({"watermark_lag_seconds": MetadataValue.float(round(lag, 1))} if lag is not None
           else {}),
        "batches": MetadataValue.int(metrics.batches),
        "checkpoint_batch_id": MetadataValue.int(
            -1 if metrics.checkpoint_batch_id is None else metrics.checkpoint_batch_id),
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
    lines = ["| operator | store / variables | rows | partitions | batches | largest keys (bytes) |",
             "|---|---|---:|---:|---|---|"]
    for op in operators:
        keys = "<br>".join(f"`{k}` ({b:,})" for k, b in op.largest)
        lines.append(f"| {op.operator_id} {op.operator} | {', '.join(op.variables) or op.store} "
                     f"| {op.rows:,} | {op.partitions} | {op.min_batch}..{op.max_batch} | {keys} |")
    return "\n".join(lines)


def bronze_asset(stream: str) -> AssetsDefinition:
    @asset(
        key=AssetKey(["bronze", stream]),
        group_name=STREAMING_GROUP,
        kinds={"spark", "delta"},
        freshness_policy=BRONZE_FRESHNESS,
        description=f"Landing JSON lines of {stream} ingested into Delta (malformed lines go to "
                    f"quarantine/{stream} with their reason). Exactly-once across restarts.",
    )
    def _bronze(pyspark: TidemarkSparkResource, tidemark: TidemarkResource) -> MaterializeResult:
        cfg = tidemark.config()
        metrics = run_bronze(pyspark.spark_session, cfg, stream)
        return MaterializeResult(
            metadata=run_metadata(metrics, str(cfg.paths.table("bronze", stream))))

    return _bronze


def job_asset(spec: JobSpec) -> AssetsDefinition:
    @asset(
        key=AssetKey(["gold", spec.name]),
        deps=[AssetKey(["bronze", source]) for source in spec.sources],
        group_name=STREAMING_GROUP,
        kinds={"spark", "delta"},
        description=spec.description,
        freshness_policy=job_freshness(spec),
        metadata={
            "keys": ", ".join(spec.keys),
            "output_mode": spec.output_mode,
            "state_bound": f"watermark {spec.state.watermark}" if spec.state.watermark
                           else f"ttl {spec.state.ttl}",
        },
    )
    def _gold(pyspark: TidemarkSparkResource, tidemark: TidemarkResource) -> MaterializeResult:
        cfg = tidemark.config()
        metrics = run_job(pyspark.spark_session, cfg, spec)
        return MaterializeResult(metadata={
            **run_metadata(metrics, str(cfg.paths.table("gold", spec.name))),
            "state": MetadataValue.md(state_markdown(pyspark.spark_session, cfg, spec.name)),
        })

    return _gold


def streaming_assets() -> list:
    return [
        *(bronze_asset(stream) for stream in streams()),
        *(job_asset(spec) for spec in registry().values()),
    ]
