"""A user adds a job as one module in a folder of their own; it runs and becomes an asset."""

from __future__ import annotations

import textwrap
from collections import Counter

import pytest
from dagster import AssetKey

from conftest import land, txn
from streaming_jobs.jobs import get_job, registry
from streaming_jobs.lake import read_table
from streaming_jobs.runner import run_bronze, run_job

MODULE = textwrap.dedent('''
    """merchant_failures_10m: FAILED transactions per merchant per 10-minute window.

    Tumbling windows; state bounded by a 5-minute watermark.
    """
    from pyspark.sql import functions as F

    from streaming_jobs.jobs.dedup import dedup_within_watermark
    from streaming_jobs.jobs.spec import JobSpec, StateBound


    def build(events, *, window, watermark):
        failed = dedup_within_watermark(events, "event_time", watermark).where("status = 'FAILED'")
        return (failed.groupBy("merchant", F.window("event_time", window).alias("w"))
                .agg(F.count(F.lit(1)).alias("failures"))
                .select("merchant", F.col("w.start").alias("window_start"),
                        F.col("w.end").alias("window_end"), "failures"))


    SPEC = JobSpec(
        name="merchant_failures_10m", description="FAILED transactions per merchant per 10 min",
        source="transactions", keys=("merchant", "window_start", "window_end"),
        measures=("failures",), event_time="event_time", state=StateBound(watermark="5 minutes"),
        output_mode="append", build=build, params={"window": "10 minutes"},
    )
''')


@pytest.fixture
def user_jobs(tmp_path, monkeypatch):
    folder = tmp_path / "my_jobs"
    folder.mkdir()
    (folder / "merchant_failures.py").write_text(MODULE)
    monkeypatch.setenv("TIDEMARK_JOBS_PATH", str(folder))
    return folder


def test_a_job_module_in_a_user_folder_runs_and_is_an_asset(spark, cfg, user_jobs):
    assert "merchant_failures_10m" in registry()
    spec = get_job("merchant_failures_10m")

    from orchestration.assets.streaming import streaming_assets

    keys = {key for a in streaming_assets() for key in a.keys}
    assert AssetKey(["gold", "merchant_failures_10m"]) in keys

    events = [txn("a", "u1", 1), txn("b", "u2", 4), txn("c", "u3", 12), txn("d", "u1", 13, "APPROVED"),
              txn("e", "u1", 40)]
    for e, merchant in zip(events, ["m1", "m1", "m1", "m2", "m2"]):
        e["merchant"] = merchant
    land(cfg, "w.jsonl", events)
    run_bronze(spark, cfg, "transactions")
    run_job(spark, cfg, spec)
    got = {(r.merchant, r.window_start.minute): r.failures
           for r in read_table(spark, cfg.paths.table("gold", spec.name)).collect()}
    # watermark 40 - 5 = 35: windows [0,10) and [10,20) are final; [40,50) is still open
    expected = Counter((e["merchant"], int(e["event_time"][14:16]) // 10 * 10)
                       for e in events if e["status"] == "FAILED" and int(e["event_time"][14:16]) < 30)
    assert got == dict(expected)


def test_a_broken_job_module_is_named_in_the_error(tmp_path, monkeypatch):
    folder = tmp_path / "bad_jobs"
    folder.mkdir()
    (folder / "oops.py").write_text("import no_such_module_anywhere\n")
    monkeypatch.setenv("TIDEMARK_JOBS_PATH", str(folder))
    with pytest.raises(ImportError, match="oops.py"):
        registry()


def test_a_job_without_dbt_models_streams_but_is_left_out_of_reconciliation(user_jobs):
    from orchestration.dbt_cli import dbt_vars

    reconciled = dbt_vars()["jobs"]
    assert "merchant_failures_10m" not in reconciled
    assert set(reconciled) == {"failed_txn_velocity", "zone_revenue_hourly", "user_sessions",
                               "user_activity_profile", "order_payment_match", "events_by_type"}
    assert reconciled["zone_revenue_hourly"]["keys"] == ["pickup_zone", "window_start", "window_end"]
    assert reconciled["failed_txn_velocity"]["window_seconds"] == 86_400
