"""``tidemark_all_job``: the whole asset graph in one run (ingest, stream, reconcile)."""

import dagster as dg

from orchestration.lib.concurrency import RECON_TAG, all_queries, checkpoint_tags


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions(
        jobs=[
            dg.define_asset_job(
                "tidemark_all_job",
                selection=dg.AssetSelection.all(),
                # one process for a run's steps: every Spark step shares one SparkSession (one JVM)
                executor_def=dg.in_process_executor,
                tags={**checkpoint_tags(all_queries()), RECON_TAG: "1"},
                description="Ingest, run every streaming job incrementally, then reconcile with dbt.",
            )
        ]
    )
