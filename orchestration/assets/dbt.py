"""dbt models as Dagster assets; dbt tests become asset checks (severity error = blocking)."""


from typing import Any, Mapping, Optional

from dagster import (AssetExecutionContext, AssetKey, AssetSelection, AutomationCondition,
                     Output)
from dagster_dbt import DagsterDbtTranslator, DbtCliResource, dbt_assets

from streaming_jobs.config import TidemarkConfig

from orchestration.assets.streaming import STREAM_PROGRESS
from orchestration.concurrency import CONTINUOUS_TAG
from orchestration.dbt_models import reconciled_jobs
from orchestration.project import dbt_project, ensure_manifest
from orchestration.recon_report import recon_counts, recon_metadata
from orchestration.resources import TidemarkResource


RECON_GROUP = "reconciliation"


def reconcile_on_update() -> AutomationCondition:
    """Dagster's eager condition, except that updates made by continuous runs do not count.

    A gold or bronze table materialized by an incremental run requests the staging, batch and
    recon models downstream of it in one run. A continuous run reports its tables every flush
    (that keeps them fresh in the UI); reconciling after each would keep a reconciliation
    running at all times, so continuously hosted jobs are reconciled by
    ``reconciliation_schedule`` instead.
    """
    updated = (AutomationCondition.newly_updated()
               & ~AutomationCondition.executed_with_root_target()
               & ~AutomationCondition.all_new_updates_have_run_tags(tag_keys={CONTINUOUS_TAG})
               ).with_label("updated_outside_continuous_runs")
    return (
        AutomationCondition.in_latest_time_window()
        & (AutomationCondition.newly_missing()
           | AutomationCondition.any_deps_match(
               updated | AutomationCondition.will_be_requested()).with_label("any_deps_updated")
           ).since_last_handled()
        & ~AutomationCondition.any_deps_missing()
        & ~AutomationCondition.any_deps_in_progress()
        & ~AutomationCondition.in_progress()
    ).with_label("reconcile_on_update")


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
        # The progress table is written by the listener, never materialized by a run: it must
        # not count as a missing dependency that holds everything back.
        return reconcile_on_update().ignore(AssetSelection.keys(STREAM_PROGRESS.key))


def build_dbt_assets(cfg: TidemarkConfig):
    manifest = ensure_manifest(cfg)  # first: it writes the data root's copy of the project
    project = dbt_project(cfg)
    jobs = set(reconciled_jobs())

    @dbt_assets(manifest=manifest, project=project, dagster_dbt_translator=TidemarkTranslator(),
                name="tidemark_dbt")
    def tidemark_dbt(context: AssetExecutionContext, dbt: DbtCliResource,
                     tidemark: TidemarkResource):
        run_cfg = tidemark.config()
        target = run_cfg.paths.dbt / "target" / f"run-{context.run.run_id[:8]}"
        # tidemark-dbt takes the run's data root first; it picks the SQL endpoint when one
        # runs (no JVM here), and pins the streams' position for the whole build.
        args = ["--data-root", str(run_cfg.data_root), "build"]
        for event in dbt.cli(args, context=context, target_path=target).stream():
            if isinstance(event, Output):
                key = context.asset_key_for_output(event.output_name)
                job = key.path[-1].removeprefix("recon_")
                if key.path[0] == "recon" and job in jobs:
                    # the recon table was just built: its classes, plotted run after run
                    counts = recon_counts(run_cfg, job)
                    event = event.with_metadata({**event.metadata, **recon_metadata(counts)})
            yield event

    return tidemark_dbt
