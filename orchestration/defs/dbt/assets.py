"""The dbt models as Dagster assets; dbt tests become asset checks (severity error = blocking).

Model keys mirror the dbt layers: ``staging/<model>``, ``batch/<model>``, ``recon/<model>``.
They are partitioned by day of event time (`orchestration.recon.recon_partitions`: what a run's
partitions, and its ``tidemark/recon`` tag, make it recompute).
The asset runs ``dbt build`` through ``tidemark-dbt`` (the SQL endpoint when it runs, so no JVM
here), with its ``--vars`` built here in the open (`orchestration.recon.dbt_vars`): the jobs'
parameters and the streams' pinned position. Each recon model's materialization carries its
class counts; ``recon_summary``'s carries the per-job table and the totals.
"""

import json
from typing import Any, Mapping, Optional

import dagster as dg
from dagster_dbt import DagsterDbtTranslator, DbtCliResource, dbt_assets

from streaming_jobs.core.config import TidemarkConfig

from orchestration.lib import keys

from orchestration.recon import recon_runs
from orchestration.lib.concurrency import CONTINUOUS_TAG, RECON_TAG
from orchestration.recon.dbt_models import ensure_manifest, reconciled_jobs
from orchestration.recon.dbt_vars import dbt_vars
from orchestration.recon.project import dbt_project
from orchestration.recon.recon_partitions import (
    DAY_LABEL,
    MAX_LABELLED_DAYS,
    RECON_MODE_TAG,
    labelled_days,
    partitions_def,
    recomputed_from,
    run_scope,
)
from orchestration.recon.recon_report import (
    recon_counts,
    recon_metadata,
    run_metadata,
    summary_metadata,
)
from orchestration.recon.recon_scope import left_out
from orchestration.lib.resources import TidemarkResource

RECON_GROUP = "reconciliation"


def reconcile_on_update() -> dg.AutomationCondition:
    """Dagster's eager condition, except that updates made by continuous runs do not count.

    A gold or bronze table materialized by an incremental run requests the staging, batch and
    recon models downstream of it in one run; what a reconciliation run built requests nothing.
    A continuous run reports its tables every flush (that keeps them fresh in the UI);
    reconciling after each would keep a reconciliation running at all times, so continuously
    hosted jobs are reconciled by ``reconciliation_schedule`` instead.
    """
    ac = dg.AutomationCondition
    # Nor do updates a reconciliation made itself: the models it built are reconciled already,
    # and one still running (or one that failed half way) has built some of them only; a run
    # requested on those would rebuild a recon model without its batch model, or the summary
    # from half a reconciliation (seen in the soak: recon_summary rows with unexplained rows).
    updated = (
        ac.newly_updated()
        & ~ac.executed_with_root_target()
        & ~ac.all_new_updates_have_run_tags(tag_keys={CONTINUOUS_TAG})
        & ~ac.all_new_updates_have_run_tags(tag_keys={RECON_TAG})
    ).with_label("updated_outside_continuous_runs_and_reconciliations")
    return (
        ac.in_latest_time_window()
        & (
            ac.newly_missing()
            | ac.any_deps_match(updated | ac.will_be_requested()).with_label("any_deps_updated")
        ).since_last_handled()
        & ~ac.any_deps_missing()
        & ~ac.any_deps_in_progress()
        & ~ac.in_progress()
    ).with_label("reconcile_on_update")


def with_its_asset() -> dg.AutomationCondition:
    """A check's condition: requested whenever the asset it checks is, in the same run."""
    ac = dg.AutomationCondition
    return ac.any_deps_match(ac.will_be_requested()).with_label("with_its_asset")


def _gold_fed(manifest: Mapping[str, Any], unique_id: str) -> list[str]:
    """The gold tables (dbt source ids) of the recon models a batch model feeds, directly or
    through other batch models; a recon model over every job (``recon_summary``) stands for
    every gold table."""
    every = sorted(s for s, node in manifest["sources"].items() if node["name"].startswith("gold_"))
    found: set[str] = set()
    seen: set[str] = set()
    below = [unique_id]
    while below:
        for child in manifest["child_map"].get(below.pop(), []):
            if child in seen or not child.startswith("model."):
                continue
            seen.add(child)
            if "recon" not in manifest["nodes"][child]["fqn"]:
                below.append(child)
                continue
            gold = [p for p in manifest["parent_map"][child] if p in every]
            found.update(gold or every)
    return sorted(found)


class TidemarkTranslator(DagsterDbtTranslator):
    """Model keys mirror the dbt layers: staging/<model>, batch/<model>, recon/<model>."""

    def __init__(self, partitions_def: dg.PartitionsDefinition | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.partitions_def = partitions_def

    def get_asset_key(self, dbt_resource_props: Mapping[str, Any]) -> dg.AssetKey:
        if dbt_resource_props["resource_type"] == "model":
            # fqn: project, [generated,] layer folder, model; generated models (your jobs')
            # sit in the same layers as the built-in ones
            folders = [f for f in dbt_resource_props["fqn"][1:-1] if f != "generated"]
            return dg.AssetKey([folders[0] if folders else "dbt", dbt_resource_props["name"]])
        return super().get_asset_key(dbt_resource_props)

    def get_group_name(self, dbt_resource_props: Mapping[str, Any]) -> Optional[str]:
        return RECON_GROUP

    def get_asset_spec(self, manifest, unique_id, project) -> dg.AssetSpec:
        """A batch model also depends on the gold tables of the recon models it feeds.

        It recomputes its job's rows from bronze up to the position the job's stream reached
        (its progress, pinned per invocation), so it is stale once that gold table moves, even
        with bronze unchanged. Without this dependency a run that updated gold alone (a
        recovery run, one gold asset materialized in the UI) requested the recon model without
        its batch model, and every row gold gained since the batch model's last build read as
        missing_in_batch: 16,221 unexplained rows in `tidemark live`, after a recovery run."""
        spec = super().get_asset_spec(manifest, unique_id, project)
        props = self.get_resource_props(manifest, unique_id)
        if props["resource_type"] != "model" or spec.key.path[0] != "batch":
            return spec
        known = {dep.asset_key for dep in spec.deps}
        more = [
            dg.AssetDep(
                key,
                partition_mapping=self.get_partition_mapping(
                    props, self.get_resource_props(manifest, source)
                ),
            )
            for source in _gold_fed(manifest, unique_id)
            if (key := self.get_asset_spec(manifest, source, project).key) not in known
        ]
        return spec.replace_attributes(deps=[*spec.deps, *more]) if more else spec

    def get_automation_condition(self, dbt_resource_props: Mapping[str, Any]):
        # The progress table is written by the listener and the late rows by maintenance,
        # never materialized by a run: neither may count as a missing dependency that holds
        # everything back.
        return reconcile_on_update().ignore(
            dg.AssetSelection.keys(keys.STREAM_PROGRESS, keys.STREAM_LATE_ROWS)
        )

    def get_asset_check_spec(self, asset_spec, manifest, unique_id, project):
        # A dbt test runs in the run that builds its model. Automation requests assets only,
        # so without this a reconciliation it launched built the recon tables without their
        # tests, and each recon asset's check badge read "0/5 Passed" after a clean run.
        spec = super().get_asset_check_spec(asset_spec, manifest, unique_id, project)
        if spec is None:
            return None
        return spec._replace(
            automation_condition=with_its_asset(), partitions_def=self.partitions_def
        )


def build_dbt_assets(cfg: TidemarkConfig) -> dg.AssetsDefinition:
    manifest = ensure_manifest(cfg)  # first: it writes the data root's copy of the project
    jobs = reconciled_jobs()

    daily = partitions_def(cfg)

    @dbt_assets(
        manifest=manifest,
        project=dbt_project(cfg),
        name="tidemark_dbt",
        dagster_dbt_translator=TidemarkTranslator(daily),
        partitions_def=daily,
    )
    def tidemark_dbt(
        context: dg.AssetExecutionContext, dbt: DbtCliResource, tidemark: TidemarkResource
    ):
        run_cfg = tidemark.config()
        # The jobs' parameters and the streams' position, pinned for the whole build; the
        # days each job recomputes: what its new events change, from the first of the run's
        # partitions at least, or all of them (recon_partitions.run_scope)
        full, partitions_from = run_scope(
            context.run.tags.get(RECON_MODE_TAG),
            context.partition_key_range.start,
            daily.get_first_partition_key(),
        )
        variables = dbt_vars(jobs, run_cfg, full, partitions_from)
        context.log.info(
            f"dbt vars: progress_version {variables.get('progress_version')}, "
            f"gold_versions {variables.get('gold_versions')}"
        )
        context.log.info(
            "reconciliation scope: "
            + "; ".join(f"{job} {why}" for job, why in variables.get("recon_reasons", {}).items())
        )
        target = run_cfg.paths.dbt / "target" / f"run-{context.run.run_id[:8]}"
        # tidemark-dbt takes the run's data root first and picks the SQL endpoint when it runs
        # dbt's unit tests check the models' SQL on fixed rows: CI runs them (and `make dbt
        # ARGS=build`), a scheduled reconciliation need not pay for them every time
        args = [
            "--data-root",
            str(run_cfg.data_root),
            "--dagster-run-id",
            context.run.run_id,
            "build",
            "--exclude-resource-type",
            "unit_test",
            "--vars",
            json.dumps(variables),
        ]
        # the jobs nothing new reached: their models and checks are left out (dagster-dbt
        # folds this --exclude into the run's selection); their tables are what they were
        skipped = left_out(variables)
        if skipped:
            context.log.info(
                f"left out, nothing new since the last reconciliation: {', '.join(skipped)}"
            )
            args += ["--exclude", " ".join(skipped)]
        invocation = dbt.cli(args, context=context, target_path=target, raise_on_error=False)
        summarized = False
        run_days = set(context.partition_keys)
        for event in invocation.stream():
            days: list[str] = []
            if isinstance(event, dg.Output):
                key = context.asset_key_for_output(event.output_name)
                job = key.path[-1].removeprefix("recon_")
                day_job = _job_with_days(key, jobs)
                if day_job is not None:
                    # the days of data this run rewrote: each day's partition says so
                    days, unlabelled = labelled_days(
                        _days_held(run_cfg, key),
                        recomputed_from(variables, day_job),
                        run_days,
                        daily,
                    )
                    event = event.with_metadata(
                        {
                            **event.metadata,
                            "labelled_days": _days_text(days, unlabelled),
                        }
                    )
                if key == keys.RECON_SUMMARY:
                    summarized = True
                    event = event.with_metadata({**event.metadata, **summary_metadata(run_cfg)})
                elif key.path[0] == "recon" and job in jobs:
                    # the recon table was just built: its classes, plotted run after run
                    counts = recon_counts(run_cfg, job)
                    event = event.with_metadata(
                        {
                            **event.metadata,
                            **recon_metadata(counts),
                            "recomputed_from": recomputed_from(variables, job),
                        }
                    )
            yield event
            for day in days:
                yield dg.AssetMaterialization(
                    asset_key=key,
                    partition=day,
                    metadata={DAY_LABEL: context.run.run_id},
                )
        if keys.RECON_SUMMARY in context.selected_asset_keys and not summarized:
            # dbt skipped the summary (a blocking check failed, or a model upstream): the run's
            # outcome, which tidemark-dbt recorded in ops/recon_runs, is shown on it all the same
            yield dg.AssetObservation(
                asset_key=keys.RECON_SUMMARY, metadata=run_metadata(recon_runs.status(run_cfg))
            )
        error = invocation.get_error()
        if error is not None:
            raise error

    return tidemark_dbt


def _job_with_days(key: dg.AssetKey, jobs: Mapping[str, Any]) -> str | None:
    """The job whose batch or recon table ``key`` is, when that job has a day
    (``recon_partition``); else None."""
    layer, name = key.path[0], key.path[-1]
    if layer == "recon":
        job = name.removeprefix("recon_")
    elif layer == "batch" and name.startswith("int_") and name.endswith("__batch"):
        job = name[len("int_") : -len("__batch")]
    else:
        return None
    spec = jobs.get(job)
    return job if spec is not None and spec.recon_partition else None


def _days_held(cfg: TidemarkConfig, key: dg.AssetKey) -> set[str]:
    """The recon_date partitions the table of ``key`` holds (its Delta log, through delta-rs;
    no JVM)."""
    from streaming_jobs.core import locations

    table = locations.delta_table(cfg.paths.dbt_table(key.path[0], key.path[-1]))
    return {p["recon_date"] for p in table.partitions() if p.get("recon_date")}


def _days_text(days: list[str], unlabelled: int) -> str:
    if not days:
        return "none besides the run's own"
    text = f"{days[0]} to {days[-1]} ({len(days)} with rows)" if len(days) > 1 else days[0]
    if unlabelled:
        text += f"; {unlabelled} older days rewritten but not labelled (a run labels at most"
        text += f" {MAX_LABELLED_DAYS}: backfill them to label them)"
    return text


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions(assets=[build_dbt_assets(TidemarkConfig.from_env())])
