"""Reconciliation on the hand-built case, with real dbt: each row in its expected class."""

from __future__ import annotations

import pytest

import scenarios
from helpers import dbt, land, txn
from streaming_jobs.runner import run_bronze
from orchestration.dbt_models import reconciled_jobs
from streaming_jobs.lake import read_table


@pytest.mark.slow
def test_recon_classifies_late_and_open_windows(spark, cfg):
    reported_late, _ = scenarios.run_waves(spark, cfg)
    # Bronze moves on before the job runs again (as on a schedule): reconciliation is as of the
    # stream's position, so these rows change nothing and are counted as not yet read.
    land(cfg, "wave-3.jsonl", [txn("n1", "u1", 40), txn("n2", "u4", 1700), txn("n3", "u2", 126)])
    run_bronze(spark, cfg, "transactions")

    result = dbt("build")
    assert result.returncode == 0, result.stdout[-3000:]

    recon = read_table(spark, cfg.paths.dbt_table("recon", "recon_failed_txn_velocity"))
    got = {(r.user_id, r.window_start, r.window_end): r.recon_class for r in recon.collect()}
    expected = scenarios.expected_recon_classes()
    assert got == expected
    assert {"match", "late_dropped", "window_open"} <= set(expected.values())

    summary = read_table(spark, cfg.paths.dbt_table("recon", "recon_summary")).collect()
    # a row per reconciled job, also for the jobs that have nothing to compare yet
    assert sorted(r.job for r in summary) == sorted(reconciled_jobs())
    assert all(r.rows_compared == r.unexplained_rows == 0 and r.stream_watermark is None
               for r in summary if r.job != "failed_txn_velocity")
    row = next(r for r in summary if r.job == "failed_txn_velocity")
    assert row.unexplained_rows == 0 and row.rows_compared == len(expected)
    assert row.late_events_replayed == row.late_events_reported == reported_late == 1
    late = read_table(spark, cfg.paths.dbt_table("batch", "int_late_events")).where(
        "job = 'failed_txn_velocity'").collect()[0]
    assert late.events_not_yet_read == 3

    # A second reconciliation appends to the history instead of replacing it.
    assert dbt("build", "--select", "recon_summary").returncode == 0
    assert read_table(spark, cfg.paths.dbt_table("recon", "recon_summary")).count() == 2 * len(
        summary)


@pytest.mark.slow
def test_injected_gold_faults_land_in_their_classes_and_block_what_is_downstream(spark, cfg):
    from datetime import timedelta

    from dagster import AssetKey, DagsterInstance
    from delta.tables import DeltaTable

    from orchestration.definitions import build_definitions

    scenarios.run_waves(spark, cfg)
    expected = scenarios.expected_recon_classes()
    deleted, changed, doubled = sorted(k for k, c in expected.items() if c == "match")[:3]
    ghost_start = scenarios.START + timedelta(hours=1)
    ghost = ("ghost", ghost_start, ghost_start + timedelta(seconds=scenarios.WINDOW_S))

    path = str(cfg.paths.table("gold", "failed_txn_velocity"))
    gold = DeltaTable.forPath(spark, path)

    def where(key) -> str:
        return (f"user_id = '{key[0]}' and window_start = timestamp'{key[1]}' "
                f"and window_end = timestamp'{key[2]}'")

    gold.delete(where(deleted))
    gold.update(where(changed), {"failed_count": "failed_count + 5"})
    read_table(spark, cfg.paths.table("gold", "failed_txn_velocity")).where(where(doubled)) \
        .write.format("delta").mode("append").save(path)
    spark.createDataFrame([(*ghost, 3)], "user_id string, window_start timestamp, "
                          "window_end timestamp, failed_count long") \
        .write.format("delta").mode("append").save(path)

    defs = build_definitions()
    result = defs.resolve_job_def("reconciliation_job").execute_in_process(
        instance=DagsterInstance.ephemeral(), raise_on_error=False)
    assert not result.success

    recon = read_table(spark, cfg.paths.dbt_table("recon", "recon_failed_txn_velocity")).collect()
    got = {(r.user_id, r.window_start, r.window_end): r.recon_class for r in recon}
    faulty = {deleted: "missing_in_stream", changed: "value_mismatch",
              doubled: "value_mismatch", ghost: "missing_in_batch"}
    assert got == {**expected, **faulty}
    diffs = {(r.user_id, r.window_start, r.window_end): (r.failed_count_diff, r.stream_rows)
             for r in recon}
    assert diffs[changed] == (5, 1) and diffs[doubled] == (expected_count(doubled), 2)

    checks = {e.event_specific_data.asset_check_key.name: e.event_specific_data.passed
              for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"}
    blocking = [name for name in checks if name == "no_unexplained_rows__failed_txn_velocity"]
    assert blocking and not any(checks[name] for name in blocking)
    materialized = {e.event_specific_data.materialization.asset_key
                    for e in result.get_asset_materialization_events()}
    assert AssetKey(["recon", "recon_failed_txn_velocity"]) in materialized
    assert AssetKey(["recon", "recon_summary"]) not in materialized  # downstream did not run


def expected_count(key) -> int:
    """The on-time count of a streamed change point (what the duplicated row doubles)."""
    return scenarios.expected_stream_rows()[key]
