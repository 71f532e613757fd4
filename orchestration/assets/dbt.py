"""dbt models as Dagster assets; dbt tests become asset checks (severity error = blocking)."""


import os
from typing import Any, Mapping, Optional

from dagster import AssetExecutionContext, AssetKey, AssetSelection, AutomationCondition, Output
from dagster_dbt import DagsterDbtTranslator, DbtCliResource, dbt_assets

from streaming_jobs.config import TidemarkConfig

from orchestration.assets.streaming import STREAM_PROGRESS
from orchestration.dbt_models import reconciled_jobs
from orchestration.project import dbt_project, ensure_manifest
from orchestration.recon_report import recon_counts, recon_metadata
from orchestration.resources import TidemarkResource, TidemarkSparkResource


RECON_GROUP = "reconciliation"


class TidemarkTranslator(DagsterDbtTranslator):
    """Model keys mirror the dbt layers: staging/<model>, batch/<model>, recon/<model>."""

    def get_asset_key(self, dbt_resource_props: Mapping[str, Any]) -> AssetKey:
        if dbt_resource_props["resource_type"] == "model":
            layer = dbt_resource_props["fqn"][1] if len(dbt_resource_props["fqn"]) > 2 else "dbt"
            return AssetKey([layer, dbt_resource_props["name"]])
        return super().get_asset_key(dbt_resource_props)

    def get_group_name(self, dbt_resource_props: Mapping[str, Any]) -> Optional[str]:
        return RECON_GROUP

    def get_automation_condition(self, dbt_resource_props: Mapping[str, Any]):
        # Reconcile as soon as what a model reads changed: a gold or bronze materialization
        # requests the staging, batch and recon models downstream of it in one run. The progress
        # table is written by the listener, never materialized by a run: it must not count as a
        # missing dependency that holds everything back.
        return AutomationCondition.eager().ignore(AssetSelection.keys(STREAM_PROGRESS.key))


def build_dbt_assets(cfg: TidemarkConfig):
    manifest = ensure_manifest(cfg)  # first: it writes the data root's copy of the project
    project = dbt_project(cfg)
    jobs = set(reconciled_jobs())

    @dbt_assets(manifest=manifest, project=project, dagster_dbt_translator=TidemarkTranslator(),
                name="tidemark_dbt")
    def tidemark_dbt(context: AssetExecutionContext, dbt: DbtCliResource,
                     tidemark: TidemarkResource, pyspark: TidemarkSparkResource):
        run_cfg = tidemark.config()
        # The dbt subprocess inherits the environment: this is how it finds the run's data root.
        os.environ["TIDEMARK_DATA_ROOT"] = str(run_cfg.data_root)
        target = run_cfg.paths.dbt / "target" / f"run-{context.run.run_id[:8]}"
        for event in dbt.cli(["build"], context=context, target_path=target).stream():
            if isinstance(event, Output):
                key = context.asset_key_for_output(event.output_name)
                job = key.path[-1].removeprefix("recon_")
                if key.path[0] == "recon" and job in jobs:
                    # the recon table was just built: its classes, plotted run after run
                    counts = recon_counts(pyspark.spark_session, run_cfg, job)
                    event = event.with_metadata({**event.metadata, **recon_metadata(counts)})
            yield event

    return tidemark_dbt
