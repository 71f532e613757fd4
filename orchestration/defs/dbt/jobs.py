"""``reconciliation_job``: the dbt assets only (no streaming), one at a time (its run tag)."""

import dagster as dg

from orchestration.lib.concurrency import RECON_TAG
from orchestration.defs.dbt.assets import RECON_GROUP

reconciliation_job = dg.define_asset_job(
    "reconciliation_job",
    selection=dg.AssetSelection.groups(RECON_GROUP),
    executor_def=dg.in_process_executor,
    tags={RECON_TAG: "1"},
    description="Recompute every job's aggregates in batch with dbt and reconcile them with "
    "what the streams wrote (no streaming; through the SQL endpoint when it runs).",
)


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions(jobs=[reconciliation_job])
