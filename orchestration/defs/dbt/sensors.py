"""``reconcile_on_update_sensor``: evaluates the dbt assets' automation condition
(`reconcile_on_update`); on by default in a new instance, so "reconcile after an incremental
run" happens with no click."""

import dagster as dg

from orchestration.lib.concurrency import RECON_TAG
from orchestration.defs.dbt.assets import RECON_GROUP
from orchestration.recon.recon_partitions import INCREMENTAL, RECON_MODE_TAG

reconcile_on_update_sensor = dg.AutomationConditionSensorDefinition(
    "reconcile_on_update_sensor",
    target=dg.AssetSelection.groups(RECON_GROUP),
    default_status=dg.DefaultSensorStatus.RUNNING,
    # incremental (the days its new events change), on today's partition (the condition's
    # in_latest_time_window)
    run_tags={RECON_TAG: "1", RECON_MODE_TAG: INCREMENTAL},
    minimum_interval_seconds=30,
    description="Reconciles after an incremental run updated a gold or bronze table (the dbt "
    "assets' reconcile_on_update condition).",
)


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions(sensors=[reconcile_on_update_sensor])
