"""`reconcile_on_update` on a real Dagster instance, with a continuous run's report landing in the
middle of an automation tick (the race behind a soak's one spurious reconciliation).

The tick is driven as the daemon drives it (Dagster's own tick evaluation context, cursor carried
from tick to tick); the report is written between the moment the tick notes the event log's last
id and the moment it evaluates.
"""

from __future__ import annotations

import logging

import dagster as dg
import pytest
from dagster._core.definitions.asset_daemon_cursor import AssetDaemonCursor
from dagster._core.definitions.automation_tick_evaluation_context import (
    AutomationTickEvaluationContext,
)
from dagster._core.events import DagsterEvent, DagsterEventType, StepMaterializationData
from dagster._core.test_utils import create_run_for_test, instance_for_test

from orchestration.lib.concurrency import CONTINUOUS_TAG, RECON_TAG
from orchestration.defs.dbt.assets import reconcile_on_update
from orchestration.cli.live import DAEMON_ENV

GOLD = dg.AssetKey(["gold", "g"])
RECON = dg.AssetKey(["recon", "recon_g"])


@dg.asset(key=GOLD)
def gold():
    return None


@dg.asset(key=RECON, deps=[gold], automation_condition=reconcile_on_update())
def recon():
    return None


class Ticks:
    """Automation ticks over gold -> recon, each with the cursor the one before left."""

    def __init__(self, instance):
        self.instance = instance
        self.graph = dg.Definitions(assets=[gold, recon]).resolve_asset_graph()
        self.cursor = AssetDaemonCursor.empty()
        self.runs = {
            tag: create_run_for_test(instance, job_name=f"run_{i}", tags=tags)
            for i, (tag, tags) in enumerate(
                {
                    "continuous": {CONTINUOUS_TAG: "1"},
                    "reconciliation": {RECON_TAG: "1"},
                    "incremental": {},
                }.items()
            )
        }

    def report(self, key: dg.AssetKey, by: str) -> None:
        run = self.runs[by]
        self.instance.report_dagster_event(
            DagsterEvent(
                event_type_value=DagsterEventType.ASSET_MATERIALIZATION.value,
                job_name=run.job_name,
                event_specific_data=StepMaterializationData(dg.AssetMaterialization(key)),
            ),
            run_id=run.run_id,
        )

    def tick(self, during=None) -> set[dg.AssetKey]:
        """One tick: the keys it requests. ``during`` runs after the tick noted the log's id."""
        context = AutomationTickEvaluationContext(
            evaluation_id=self.cursor.evaluation_id + 1,
            instance=self.instance,
            asset_graph=self.graph,
            cursor=self.cursor,
            materialize_run_tags={},
            observe_run_tags={},
            auto_observe_asset_keys=set(),
            asset_selection=dg.AssetSelection.all(),
            logger=logging.getLogger("test"),
            emit_backfills=False,
        )
        if during:
            during()
        requests, self.cursor, _ = context.evaluate()
        return {key for request in requests for key in request.asset_selection or ()}


@pytest.fixture
def ticks(monkeypatch):
    def start(env: dict[str, str]) -> Ticks:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        return Ticks(instance)

    with instance_for_test() as instance:
        yield start


def settled(ticks: Ticks) -> Ticks:
    """Both assets materialized (gold by the continuous run, recon by a reconciliation), then a
    tick that has seen it all."""
    ticks.report(GOLD, "continuous")
    ticks.report(RECON, "reconciliation")
    ticks.tick()
    assert ticks.tick() == set()
    return ticks


def test_a_continuous_report_during_a_tick_requests_nothing_with_the_daemon_env(ticks):
    t = settled(ticks(DAEMON_ENV))
    assert t.tick(during=lambda: t.report(GOLD, "continuous")) == set()
    assert t.tick() == set()  # the next tick sees that report, with its run's tags
    # an incremental run's update still asks for the reconciliation, once
    assert t.tick(during=lambda: t.report(GOLD, "incremental")) == set()
    assert t.tick() == {RECON}


def test_without_it_the_same_report_reads_as_an_untagged_update(ticks):
    # Dagster's default (no settle time): the race the daemon env closes is real
    t = settled(ticks({"DAGSTER_AUTOMATION_TICK_SETTLE_SECONDS": "0"}))
    assert t.tick(during=lambda: t.report(GOLD, "continuous")) == {RECON}
