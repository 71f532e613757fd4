"""The one Definitions of tidemark's Dagster code location (loaded by workspace.yaml)."""

from __future__ import annotations

from dagster import AssetSelection, Definitions, define_asset_job, in_process_executor

from streaming_jobs.config import TidemarkConfig

from orchestration.assets.dbt import build_dbt_assets
from orchestration.assets.streaming import STREAM_PROGRESS, STREAMING_GROUP, streaming_assets
from orchestration.resources import build_resources

# One process for a run's steps: every Spark step shares one SparkSession (one JVM).
tidemark_all_job = define_asset_job(
    "tidemark_all_job",
    selection=AssetSelection.all(),
    executor_def=in_process_executor,
    description="Ingest, run every streaming job incrementally, then reconcile with dbt.",
)
streaming_job = define_asset_job(
    "streaming_job",
    selection=AssetSelection.groups(STREAMING_GROUP),
    executor_def=in_process_executor,
    description="Ingest and run every streaming job incrementally (no reconciliation).",
)


def build_definitions(cfg: TidemarkConfig | None = None) -> Definitions:
    cfg = cfg or TidemarkConfig.from_env()
    return Definitions(
        assets=[*streaming_assets(), build_dbt_assets(cfg), STREAM_PROGRESS],
        jobs=[tidemark_all_job, streaming_job],
        resources=build_resources(cfg),
    )


defs = build_definitions()
