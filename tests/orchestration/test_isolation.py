"""One bad job file takes nothing else down: it is left out, named and alerted; the other jobs
load, materialize through Dagster, and the sensors keep ticking."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from dagster import AssetKey, DagsterInstance, build_sensor_context

from helpers import land, txn
from streaming_jobs.storage import ops_tables
from streaming_jobs.storage.lake import read_table

GOOD = """-- merchant_failures: FAILED transactions per merchant per 10 minutes.
-- source: transactions
-- keys: merchant, window_start, window_end
-- measures: failures
-- watermark: 5 minutes
select merchant, window.start as window_start, window.end as window_end, count(*) as failures
from events where status = 'FAILED'
group by merchant, window(event_time, '10 minutes')
"""
# each breaks in its own way; the file stem is what the alert names
BROKEN = {
    "syntax_error.py": "def build(:\n",
    "bad_import.py": "import no_such_module_anywhere\n",
    "bad_stream.py": (
        "from pyspark.sql import types as T\n"
        "from streaming_jobs.schemas import Field, StreamSchema\n"
        "STREAM = StreamSchema(name='Bad Name', event_time='t', "
        "fields=(Field('t', T.TimestampType(), 'when'),))\n"
    ),
    "no_keys.sql": "-- source: transactions\n-- watermark: 5 minutes\nselect 1 as x from events\n",
    "unknown_stream.sql": GOOD.replace("-- source: transactions", "-- source: nowhere"),
    "twice.sql": GOOD.replace("-- source:", "-- name: failed_txn_velocity\n-- source:"),
    "escapes.sql": GOOD.replace("-- source:", "-- name: ../../outside\n-- source:"),
    "unbounded.sql": (
        "-- unbounded: payments per order, forever.\n-- source: orders\n"
        "-- joins: payments\n-- keys: order_id, payment_id\n-- measures: paid\n"
        "-- watermark: 10 minutes\n"
        "select o.order_id, p.payment_id, p.amount as paid\n"
        "from orders o join payments p on o.order_id = p.order_id\n"
    ),
}


def job_file_alerts(cfg) -> dict[str, dict]:
    return {r["job"]: r for r in ops_tables.read(cfg, "alerts") if r["kind"] == "job_file"}


@pytest.mark.slow
def test_broken_job_files_are_left_out_and_alerted_while_the_rest_runs(
    spark, cfg, tmp_path, monkeypatch
):
    from orchestration.definitions import build_definitions
    from orchestration.defs.ops.sensors import checkpoint_health_sensor, platform_health_sensor
    from orchestration.lib.resources import TidemarkResource

    folder = tmp_path / "jobs"
    folder.mkdir()
    (folder / "merchant_failures.sql").write_text(GOOD)
    for name, text in BROKEN.items():
        (folder / name).write_text(text)
    monkeypatch.setenv("TIDEMARK_JOBS_PATH", str(folder))

    defs = build_definitions()  # loads: nothing raised
    graph = defs.resolve_asset_graph()
    gold = {k.path[1] for k in graph.get_all_asset_keys() if k.path[0] == "gold"}
    assert "merchant_failures" in gold and "failed_txn_velocity" in gold
    assert not gold & {"no_keys", "unknown_stream", "twice", "unbounded", "outside"}
    assert {s.name for s in defs.sensors} >= {
        "checkpoint_health_sensor",
        "platform_health_sensor",
        "state_size_sensor",
    }

    # the good user job and a built-in one materialize through Dagster
    land(cfg, "w.jsonl", [dict(txn(f"e{i}", "u1", i), merchant="m1") for i in range(1, 31)])
    instance = DagsterInstance.ephemeral()
    result = defs.resolve_job_def("streaming_job").execute_in_process(
        instance=instance,
        asset_selection=[
            AssetKey(["bronze", "transactions"]),
            AssetKey(["gold", "merchant_failures"]),
            AssetKey(["gold", "failed_txn_velocity"]),
        ],
    )
    assert result.success
    windows = read_table(spark, cfg.paths.table("gold", "merchant_failures")).collect()
    # minutes 1..30 FAILED for m1, watermark 30 - 5: [0,10) and [10,20) are final
    assert sorted((r.window_start.minute, r.failures) for r in windows) == [(0, 9), (10, 10)]
    assert not (cfg.data_root.parent / "outside").exists()

    # the checkpoint sensor evaluates the jobs that load; the platform sensor names every
    # broken file in a critical alert of its own
    context = build_sensor_context(
        instance=instance, resources={"tidemark": TidemarkResource(data_root=str(cfg.data_root))}
    )
    tick = checkpoint_health_sensor(context)
    assert {e.asset_key.path[1] for e in tick.asset_events} >= {"merchant_failures"}
    assert job_file_alerts(cfg) == {}
    platform_health_sensor(context)
    raised = job_file_alerts(cfg)
    assert set(raised) == {
        "syntax_error",
        "bad_import",
        "bad_stream",
        "no_keys",
        "unknown_stream",
        "twice",
        "escapes",
        "unbounded",
    }
    assert all(r["severity"] == "critical" and r["resolved_at"] is None for r in raised.values())
    for subject, expected in {
        "syntax_error": "SyntaxError",
        "bad_import": "No module named 'no_such_module_anywhere'",
        "bad_stream": "a stream name is lower case letters",
        "no_keys": f"{folder / 'no_keys.sql'}:1: missing header keys",
        "unknown_stream": "reads nowhere, which no registered stream declares",
        "twice": "job name 'failed_txn_velocity' is already declared",
        "escapes": "lower case letters, digits and _",
        "unbounded": f"{folder / 'unbounded.sql'}:7: error: job unbounded: unbounded state",
    }.items():
        assert expected in raised[subject]["message"], (subject, raised[subject]["message"])

    # fixed and removed files resolve their alerts at the next tick
    (folder / "no_keys.sql").write_text(GOOD.replace("merchant_failures:", "no_keys:"))
    for name in (
        "syntax_error.py",
        "bad_import.py",
        "bad_stream.py",
        "unknown_stream.sql",
        "twice.sql",
        "escapes.sql",
        "unbounded.sql",
    ):
        (folder / name).unlink()
    platform_health_sensor(context)
    assert all(r["resolved_at"] is not None for r in job_file_alerts(cfg).values())


BAD_SETTINGS = {
    "TIDEMARK_SAVEPOINTS_KEEP": "0",
    "TIDEMARK_RECON_CRON": "every hour",
    "TIDEMARK_STALL_SECONDS": "nan",
    "TIDEMARK_ALERT_RETRY_SECONDS": "soon",
}


def test_a_bad_setting_takes_its_default_and_is_alerted_while_everything_loads(cfg, monkeypatch):
    from orchestration.definitions import build_definitions
    from orchestration.defs.ops.sensors import platform_health_sensor
    from orchestration.lib.resources import TidemarkResource
    from streaming_jobs.core.config import TidemarkConfig, tolerate_bad_settings

    for name, value in BAD_SETTINGS.items():
        monkeypatch.setenv(name, value)
    # the command line stays strict: one message naming the variable, no traceback, nothing runs
    cli = subprocess.run(
        [str(Path(sys.executable).with_name("tidemark")), "summary"],
        capture_output=True,
        text=True,
        env=os.environ.copy(),
    )
    assert cli.returncode == 2 and "Traceback" not in cli.stderr
    assert cli.stderr.startswith("tidemark: TIDEMARK_") and cli.stderr.count("\n") == 1
    try:
        defs = build_definitions()  # loads
        assert defs.resolve_schedule_def("reconciliation_schedule").cron_schedule == "0 * * * *"
        assert TidemarkConfig.from_env().ops.savepoints_keep == 3  # the default
        assert {s.name for s in defs.sensors} >= {
            "platform_health_sensor",
            "state_size_sensor",
            "expectations_sensor",
        }
        context = build_sensor_context(
            instance=DagsterInstance.ephemeral(),
            resources={"tidemark": TidemarkResource(data_root=str(cfg.data_root))},
        )
        platform_health_sensor(context)
        raised = {r["job"]: r for r in ops_tables.read(cfg, "alerts") if r["kind"] == "setting"}
        assert set(raised) == set(BAD_SETTINGS)
        assert "'every hour' is not a cron string" in raised["TIDEMARK_RECON_CRON"]["message"]
        assert "running with its default" in raised["TIDEMARK_SAVEPOINTS_KEEP"]["message"]
        assert not set(BAD_SETTINGS) & set(os.environ)  # what it starts gets the defaults too
        tolerate_bad_settings(False)  # fixed, and the code server restarted
        tolerate_bad_settings(True)
        platform_health_sensor(context)
        assert all(
            r["resolved_at"] is not None
            for r in ops_tables.read(cfg, "alerts")
            if r["kind"] == "setting"
        )
    finally:
        tolerate_bad_settings(False)
