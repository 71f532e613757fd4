"""Reconciliation on the hand-built case, with real dbt: each row in its expected class."""

from __future__ import annotations

import pytest

import scenarios
from conftest import dbt
from streaming_jobs.lake import read_table


@pytest.mark.slow
def test_recon_classifies_late_and_open_windows(spark, cfg):
    reported_late, _ = scenarios.run_waves(spark, cfg)

    result = dbt("build")
    assert result.returncode == 0, result.stdout[-3000:]

    recon = read_table(spark, cfg.paths.dbt_table("recon", "recon_failed_txn_velocity"))
    got = {(r.user_id, r.window_start, r.window_end): r.recon_class for r in recon.collect()}
    expected = scenarios.expected_recon_classes()
    assert got == expected
    assert {"match", "late_dropped", "window_open"} <= set(expected.values())

    summary = read_table(spark, cfg.paths.dbt_table("recon", "recon_summary")).collect()
    assert len(summary) == 1
    row = summary[0]
    assert row.unexplained_rows == 0 and row.rows_compared == len(expected)
    assert row.late_events_replayed == row.late_events_reported == reported_late == 1

    # A second reconciliation appends to the history instead of replacing it.
    assert dbt("build", "--select", "recon_summary").returncode == 0
    assert read_table(spark, cfg.paths.dbt_table("recon", "recon_summary")).count() == 2
