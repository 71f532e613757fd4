"""Streaming assets, built from the registries: ``bronze/<stream>`` and ``gold/<job>``.

Each materialization runs the query incrementally (``availableNow``): it processes everything
that arrived since the last one, commits its checkpoint and stops, and its metadata says what it
did and where the query stands (Dagster plots the numeric values over time). A continuous run
reports the same assets live (`orchestration.defs.streaming.jobs`).

Every asset carries a freshness policy: a job's is derived from its spec (the lateness it
tolerates), so a stalled stream turns stale in the UI.
"""

from datetime import timedelta

import dagster as dg

from streaming_jobs.storage.registry import registry, streams
from streaming_jobs.runtime.runner import run_bronze, run_job
from streaming_jobs.spec import JobSpec
from streaming_jobs.core.versions import job_version

from orchestration.lib import keys
from orchestration.lib.metadata import run_metadata, state_markdown
from orchestration.lib.resources import TidemarkResource, TidemarkSparkResource

STREAMING_GROUP = "streaming"
BRONZE_FRESHNESS = dg.FreshnessPolicy.time_window(
    fail_window=timedelta(minutes=30), warn_window=timedelta(minutes=10)
)


def job_freshness(spec: JobSpec) -> dg.FreshnessPolicy:
    warn, fail = spec.freshness_seconds
    return dg.FreshnessPolicy.time_window(
        fail_window=timedelta(seconds=fail), warn_window=timedelta(seconds=warn)
    )


def bronze_asset(stream: str) -> dg.AssetsDefinition:
    @dg.asset(
        key=keys.bronze(stream),
        group_name=STREAMING_GROUP,
        kinds={"spark", "delta"},
        freshness_policy=BRONZE_FRESHNESS,
        description=f"Landing JSON lines of {stream} ingested into Delta (malformed lines go to "
        f"quarantine/{stream} with their reason). Exactly-once across restarts.",
    )
    def _bronze(pyspark: TidemarkSparkResource, tidemark: TidemarkResource) -> dg.MaterializeResult:
        cfg = tidemark.config()
        metrics = run_bronze(pyspark.spark_session, cfg, stream)
        return dg.MaterializeResult(
            metadata=run_metadata(metrics, str(cfg.paths.table("bronze", stream)))
        )

    return _bronze


def job_asset(spec: JobSpec, version: str | None = None) -> dg.AssetsDefinition:
    """``version``: the job's (`streaming_jobs.core.versions`), shown as its code version."""

    @dg.asset(
        key=keys.gold(spec.name),
        code_version=version,
        deps=[keys.bronze(source) for source in spec.sources],
        group_name=STREAMING_GROUP,
        kinds={"spark", "delta"},
        description=spec.description,
        freshness_policy=job_freshness(spec),
        metadata={
            "keys": ", ".join(spec.keys),
            "output_mode": spec.output_mode,
            "state_bound": f"watermark {spec.state.watermark}"
            if spec.state.watermark
            else f"ttl {spec.state.ttl}",
        },
    )
    def _gold(pyspark: TidemarkSparkResource, tidemark: TidemarkResource) -> dg.MaterializeResult:
        cfg = tidemark.config()
        metrics = run_job(pyspark.spark_session, cfg, spec)
        return dg.MaterializeResult(
            metadata={
                **run_metadata(metrics, str(cfg.paths.table("gold", spec.name))),
                "state": dg.MetadataValue.md(state_markdown(pyspark.spark_session, cfg, spec.name)),
            }
        )

    return _gold


def streaming_assets() -> list[dg.AssetsDefinition]:
    known = streams()
    return [
        *(bronze_asset(stream) for stream in known),
        *(job_asset(spec, job_version(spec, known)) for spec in registry().values()),
    ]


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions(assets=streaming_assets())
