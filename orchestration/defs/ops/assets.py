"""The ops tables and the overview, as assets others write: the progress listener, the failure
recorder and the alert outbox write the tables; `ops_overview_sensor` observes all four."""

import dagster as dg

from orchestration.lib import keys

OPS_GROUP = "ops"

OPS_ASSETS = [
    dg.AssetSpec(
        key=keys.STREAM_PROGRESS,
        group_name=OPS_GROUP,
        kinds={"delta"},
        description="One row per micro-batch of every streaming query (rows, rates, "
        "watermark, state per operator, bronze versions read, the gold "
        "version written), appended by every run's progress flush.",
    ),
    dg.AssetSpec(
        key=keys.STREAM_LATE_ROWS,
        group_name=OPS_GROUP,
        kinds={"delta"},
        description="The bronze rows that batches folded by the maintenance job "
        "dropped as late (their progress rows became one rollup row per "
        "job); reconciliation's lateness replay reads them.",
    ),
    dg.AssetSpec(
        key=keys.STREAM_FAILURES,
        group_name=OPS_GROUP,
        kinds={"delta"},
        description="Queries that ended with an error, for checkpoint_health_sensor.",
    ),
    dg.AssetSpec(
        key=keys.ALERTS,
        group_name=OPS_GROUP,
        kinds={"delta"},
        description="The alert outbox: one row per incident, its two notifications "
        "and their delivery.",
    ),
    dg.AssetSpec(
        key=keys.OVERVIEW,
        group_name=OPS_GROUP,
        description="Every job in one place: state, watermark and its lag, last batch, "
        "latest reconciliation, open alerts (observed every minute by "
        "ops_overview_sensor; the totals are plotted).",
    ),
]


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions(assets=OPS_ASSETS)
