"""Always on: a real Dagster instance (``dagster dev``: webserver, daemon, run queue) and the SQL
endpoint, with a continuous run hosting jobs while data keeps landing, and meanwhile a scheduled
reconciliation, a savepoint run and sensor ticks, all at once.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dagster import AssetKey
from deltalake import DeltaTable

from helpers import click, land, txn
from streaming_jobs.core.checkpoints import last_committed_batch
from streaming_jobs.storage.registry import get_job
from streaming_jobs.operations import savepoints
from streaming_jobs.core.checkpoints import CheckpointBusy
from streaming_jobs.runtime.runner import run_job

from orchestration.cli.live import DagsterDev, settle_runs, wait_caught_up
from orchestration.recon.recon_partitions import incremental_tags

pytestmark = pytest.mark.slow

HOSTED = ["events_by_type", "failed_txn_velocity"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rows(path) -> list[dict]:
    return DeltaTable(str(path)).to_pyarrow_table().to_pylist()


def until(what, condition, timeout=300.0, every=1.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def land_wave(cfg, wave: int) -> None:
    """Clicks and transactions ``wave`` x 20 minutes into event time (watermarks advance)."""
    base = wave * 20
    land(
        cfg,
        f"clicks-{wave}.jsonl",
        [click(f"c{wave}-{i}", f"u{i % 4}", base + i / 2) for i in range(24)],
        stream="clicks",
    )
    land(
        cfg,
        f"txn-{wave}.jsonl",
        [
            txn(f"t{wave}-{i}", f"u{i % 3}", base + i / 2, status="FAILED" if i % 2 else "APPROVED")
            for i in range(24)
        ],
        stream="transactions",
    )


@pytest.mark.long  # about 7 min: make test-long (CI keeps its parts: test_continuous, test_operations, test_dagster)
@pytest.mark.own_sql
def test_continuous_run_with_scheduled_reconciliation_savepoints_and_sensors_at_once(
    spark, endpoint_cfg
):
    cfg = endpoint_cfg
    land_wave(cfg, 0)
    dagster = DagsterDev(
        cfg,
        free_port(),
        env={
            "TIDEMARK_RECON_CRON": "* * * * *",  # the schedule fires every minute
            "TIDEMARK_SAVEPOINT_CRON": "0 0 1 1 *",
        },
    )  # savepoints are launched by hand below
    try:
        gql = dagster.start()
        # Off until data has streamed (the UI's toggle): a reconciliation of nothing would only
        # compete for the two cores with the continuous run starting up.
        assert gql.set_schedule("reconciliation_schedule", False) == "STOPPED"
        continuous = gql.launch(
            "continuous_streaming_job",
            {
                "ops": {
                    "run_continuously": {
                        "config": {
                            "jobs": HOSTED,
                            "trigger_seconds": 2.0,
                            "flush_seconds": 3.0,
                            "heartbeat_seconds": 3.0,
                        }
                    }
                }
            },
        )
        until("the continuous run to start", lambda: gql.status(continuous) == "STARTED")
        # its checkpoint tags hold the queue (below) without burying the Runs page: the UI
        # shows its few other tags only
        [hosting] = [r for r in gql.runs("continuous_streaming_job") if r["runId"] == continuous]
        shown = {t["key"] for t in hosting["tags"]}
        assert "tidemark/continuous" in shown and not any("checkpoint" in k for k in shown), shown
        assert len(shown) <= 6, shown
        gold = cfg.paths.table("gold", "events_by_type")
        until("wave 0 in gold", lambda: gold.exists() and len(rows(gold)) == 24, timeout=300)

        # Data keeps landing while it runs.
        land_wave(cfg, 1)
        until("wave 1 in gold", lambda: len(rows(gold)) == 48, timeout=300)
        # a reconciliation the schedule launched before it was turned off (the first tick can
        # come before the toggle) compares nothing: the one checked below comes later
        before_streamed = {r["runId"] for r in gql.runs("reconciliation_job")}
        assert gql.set_schedule("reconciliation_schedule", True) == "RUNNING"

        # A second run on a running checkpoint cannot run: the queue holds the incremental
        # streaming job (its checkpoint tags are taken), and a direct run is refused by the lock.
        # (the hosted jobs' assets, as "Materialize selected" in the UI launches them)
        incremental = gql.launch(
            "streaming_job",
            assets=[
                *(["bronze", s] for s in ("clicks", "transactions")),
                *(["gold", j] for j in HOSTED),
            ],
        )
        with pytest.raises(CheckpointBusy, match=f"owned by Dagster run {continuous}"):
            run_job(spark, cfg, get_job("events_by_type"))

        # Meanwhile: a savepoint run and the scheduled reconciliation complete (not queue).
        saving = gql.launch("savepoint_job")
        assert gql.wait(saving, timeout=300) == "SUCCESS"
        scheduled = until(
            "a scheduled reconciliation",
            lambda: next(
                (
                    r["runId"]
                    for r in gql.runs("reconciliation_job")
                    if {"key": "dagster/schedule_name", "value": "reconciliation_schedule"}
                    in r["tags"]
                    and r["runId"] not in before_streamed
                ),
                None,
            ),
            timeout=600,
        )
        assert gql.wait(scheduled, timeout=900) == "SUCCESS"
        # incremental, on today's partition of event time (orchestration/recon/recon_partitions.py)
        [run] = [r for r in gql.runs("reconciliation_job") if r["runId"] == scheduled]
        tags = {t["key"]: t["value"] for t in run["tags"]}
        # the UTC day of its tick (up to two minutes before it started: a run can cross midnight)
        days = {time.strftime("%Y-%m-%d", time.gmtime(run["startTime"] - lag)) for lag in (0, 120)}
        assert tags["tidemark/recon"] == "incremental" and tags["dagster/partition"] in days, tags
        assert gql.status(continuous) == "STARTED"
        assert gql.status(incremental) == "QUEUED"
        # off again: the last reconciliation below is launched by hand, once the runs are done
        assert gql.set_schedule("reconciliation_schedule", False) == "STOPPED"
        # both hosted jobs got a savepoint, taken by the continuous run between two batches
        taken = {job: savepoints.savepoints(cfg, job) for job in HOSTED}
        assert all(len(points) == 1 for points in taken.values()), taken

        # The sensors tick without error (SKIPPED: evaluated, no run to request), in seconds
        # (no JVM), the first tick included.
        for sensor in ("checkpoint_health_sensor", "state_size_sensor"):
            # a tick still under way (STARTED) has no outcome yet
            ticks = [t for t in gql.sensor_ticks(sensor) if t["status"] != "STARTED"]
            assert len(ticks) >= 2 and {t["status"] for t in ticks} <= {"SKIPPED", "SUCCESS"}, ticks
            assert all(t["endTimestamp"] - t["timestamp"] < 30 for t in ticks), ticks

        land_wave(cfg, 2)
        behind = wait_caught_up(
            [
                *(AssetKey(["bronze", s]) for s in ("clicks", "transactions")),
                *(AssetKey(["gold", j]) for j in HOSTED),
            ],
            since=time.time(),
            timeout=300,
            trigger_seconds=2.0,
        )
        assert behind == []
        gql.terminate(continuous)
        assert gql.wait(continuous, timeout=300) == "CANCELED"
        # The queue lets the incremental run go once the checkpoints are free.
        assert gql.wait(incremental, timeout=600) == "SUCCESS"
        final = gql.launch("reconciliation_job", tags=incremental_tags(cfg))
        assert gql.wait(final, timeout=900) == "SUCCESS"
        # `tidemark live` stops Dagster (and so its run workers) only once the runs in flight
        # are settled: a maintenance run under way is terminated through Dagster, CANCELED
        maintenance = gql.launch("maintenance_job")
        until("the maintenance run to start", lambda: gql.status(maintenance) == "STARTED")
        said = settle_runs(gql, 0.0)
        assert gql.wait(maintenance, timeout=300) in ("CANCELED", "SUCCESS"), said
        assert maintenance[:8] in said or said.startswith("runs in flight at the stop: none")
        # Nothing the instance ran failed, the automation's reconciliations included: one
        # requested while the incremental run had updated some gold tables only reconciles
        # those jobs at their pinned positions (reconciliations queue one at a time, so any
        # launched before the last one has ended).
        failed = [(r["jobName"], r["runId"]) for r in gql.runs() if r["status"] == "FAILURE"]
        assert not failed, failed
    finally:
        dagster.stop()

    summary = rows(cfg.paths.dbt_table("recon", "recon_summary"))
    latest = {}
    for row in sorted(summary, key=lambda r: r["reconciled_at"]):
        latest[row["job"]] = row
    assert {job: latest[job]["unexplained_rows"] for job in latest} == dict.fromkeys(latest, 0)
    assert all(latest[job]["rows_compared"] > 0 for job in HOSTED)
    # the scheduled run during streaming reconciled streamed rows too: two runs of history
    # that compared rows, per hosted job
    assert all(
        sum(1 for r in summary if r["job"] == job and r["rows_compared"] > 0) >= 2 for job in HOSTED
    ), summary

    # The savepoint the continuous run took restores: the job replays from it to the same gold.
    job = "failed_txn_velocity"
    before = sorted(tuple(r.values()) for r in rows(cfg.paths.table("gold", job)))
    committed = last_committed_batch(cfg.paths.checkpoint(job))
    point = savepoints.restore(spark, cfg, job, taken[job][0])
    assert point.batch_id < committed  # batches after the savepoint are replayed from bronze
    run_job(spark, cfg, get_job(job))
    after = sorted(tuple(r.values()) for r in rows(cfg.paths.table("gold", job)))
    assert after == before
    # dbt as a data engineer runs it: plain dbt in dbt_project/, the documented profile, the
    # endpoint target (no tidemark-dbt: the project's own vars hold the built-in jobs)
    from streaming_jobs.core.config import CHECKOUT

    env = {
        **os.environ,
        "TIDEMARK_DATA_ROOT": str(cfg.data_root),
        "TIDEMARK_SQL_PORT": str(cfg.sql.port),
        "DBT_TARGET_PATH": str(cfg.paths.dbt / "t2"),
        "DBT_LOG_PATH": str(cfg.paths.dbt / "t2"),
    }
    built = subprocess.run(
        [
            str(Path(sys.executable).with_name("dbt")),
            "build",
            "--profiles-dir",
            ".",
            "--target",
            "endpoint",
            "--select",
            f"+recon_{job}",
            "recon_summary",
        ],
        cwd=CHECKOUT / "dbt_project",
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert built.returncode == 0, built.stdout[-3000:]
    summary = rows(cfg.paths.dbt_table("recon", "recon_summary"))
    newest = max((r for r in summary if r["job"] == job), key=lambda r: r["reconciled_at"])
    assert (
        newest["unexplained_rows"] == 0 and newest["rows_compared"] == latest[job]["rows_compared"]
    )
    # a build of one job's models appends that job's summary row alone: the other jobs' recon
    # tables are from an earlier run, and their counts under this run would mix two states
    assert [r["job"] for r in summary if r["invocation_id"] == newest["invocation_id"]] == [job]
