"""Dagster: the definitions load, the whole graph materializes, the webserver serves it."""

from __future__ import annotations

import datetime as dt
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from dagster import AssetCheckKey, AssetCheckSeverity, AssetKey, DagsterInstance

from helpers import write_wave
from streaming_jobs.storage.generator import GeneratorConfig, generate
from streaming_jobs.core.config import CHECKOUT
from streaming_jobs.storage.registry import get_job
from streaming_jobs.storage.lake import read_table
from orchestration.recon.recon_partitions import DAY_LABEL

# Written out by hand: what the UI must show for the registered streams and jobs.
EXPECTED_ASSETS = {
    "bronze/transactions",
    "bronze/rides",
    "bronze/orders",
    "bronze/payments",
    "bronze/clicks",
    "gold/failed_txn_velocity",
    "gold/zone_revenue_hourly",
    "gold/user_sessions",
    "gold/user_activity_profile",
    "gold/order_payment_match",
    "gold/events_by_type",
    "ops/stream_progress",
    "ops/stream_late_rows",
    "ops/stream_failures",
    "ops/alerts",
    "ops/overview",
    "staging/stg_transactions",
    "staging/stg_rides",
    "staging/stg_clicks",
    "staging/stg_orders",
    "staging/stg_payments",
    "staging/stg_stream_progress",
    "staging/stg_stream_late_rows",
    "batch/int_failed_txn_velocity__batch",
    "batch/int_zone_revenue_hourly__batch",
    "batch/int_user_sessions__batch",
    "batch/int_user_activity_profile__batch",
    "batch/int_order_payment_match__batch",
    "batch/int_events_by_type__batch",
    "batch/int_late_events",
    "batch/int_late_events_by_source",
    "recon/recon_failed_txn_velocity",
    "recon/recon_zone_revenue_hourly",
    "recon/recon_user_sessions",
    "recon/recon_user_activity_profile",
    "recon/recon_order_payment_match",
    "recon/recon_events_by_type",
    "recon/recon_summary",
    "recon/recon_positions",
}
# the ops tables are written by the listener, the recorder and the outbox, not by a step
MATERIALIZED = EXPECTED_ASSETS - {
    "ops/stream_progress",
    "ops/stream_late_rows",
    "ops/stream_failures",
    "ops/alerts",
    "ops/overview",
}
EXPECTED_ASSETS_KEYS = [
    AssetKey(k.split("/")) for k in sorted(EXPECTED_ASSETS)
]  # written by the listener, not a step


def test_definitions_load_with_assets_checks_and_jobs(cfg):
    from orchestration.definitions import build_definitions

    defs = build_definitions()
    graph = defs.resolve_asset_graph()
    assert {k.to_user_string() for k in graph.get_all_asset_keys()} == EXPECTED_ASSETS
    assert graph.get(AssetKey(["gold", "failed_txn_velocity"])).parent_keys == {
        AssetKey(["bronze", "transactions"])
    }
    # each job's version is its gold asset's code version: the UI flags a changed job
    from streaming_jobs.core.versions import job_version
    from streaming_jobs.storage.registry import get_job, streams

    for job in ("failed_txn_velocity", "zone_revenue_hourly", "user_activity_profile"):
        version = graph.get(AssetKey(["gold", job])).code_version
        assert version == job_version(get_job(job), streams()) and len(version) == 12
    checks = {(c.asset_key.to_user_string(), c.name) for c in graph.asset_check_keys}
    assert ("recon/recon_failed_txn_velocity", "no_unexplained_rows__failed_txn_velocity") in checks
    assert ("batch/int_late_events", "late_counts_agree") in checks
    # every check says what it checks, and no name is longer than the UI shows
    specs = [graph.get_check_spec(key) for key in graph.asset_check_keys]
    assert all(spec.description for spec in specs), [s.name for s in specs if not s.description]
    assert max(len(spec.name) for spec in specs) <= 48
    # dbt tests with severity error are blocking checks: a failure stops what is downstream
    unexplained = next(
        c for c in graph.asset_check_keys if c.name.startswith("no_unexplained_rows")
    )
    assert graph.get_check_spec(unexplained).blocking
    warning = next(c for c in graph.asset_check_keys if c.name.startswith("explained_share"))
    assert not graph.get_check_spec(warning).blocking  # a signal, never a stop
    not_null = next(c for c in graph.asset_check_keys if c.name == "recon_summary__job_not_null")
    assert graph.get_check_spec(not_null).blocking  # dbt's default severity is error too
    assert {j.name for j in defs.resolve_all_job_defs()} >= {
        "tidemark_all_job",
        "streaming_job",
        "reconciliation_job",
        "continuous_streaming_job",
        "recovery_job",
        "savepoint_job",
        "rebuild_job",
        "maintenance_job",
    }
    # the operations sensors report a check per job, declared on its gold asset
    for job in ("failed_txn_velocity", "events_by_type", "order_payment_match"):
        assert {(f"gold/{job}", "checkpoint_health"), (f"gold/{job}", "state_size")} <= checks
    for name in ("checkpoint_health_sensor", "state_size_sensor", "streaming_restart_sensor"):
        assert defs.resolve_sensor_def(name).name == name
    assert defs.resolve_schedule_def("savepoint_schedule").cron_schedule == "30 * * * *"
    assert defs.resolve_schedule_def("maintenance_schedule").cron_schedule == "45 2 * * *"


def _two_waves_through_the_graph(spark, cfg, sample, monkeypatch):
    """Every stream's two waves: streaming_job, then tidemark_all_job (an incremental
    reconciliation, the first). Returns (defs, instance, first run, second run, files)."""
    from orchestration.definitions import build_definitions

    # reconciliation's days start before the data (late events reach 2025-12-31), so that a
    # backfill from 2026-01-01 is not the first partition (which would be a full run)
    monkeypatch.setenv("TIDEMARK_RECON_START_DATE", "2025-12-01")
    gen, files = sample
    rides_gen = GeneratorConfig(stream="rides", events=2000, files=3, seed=12)
    rides = generate(rides_gen)
    clicks_gen = GeneratorConfig(stream="clicks", events=2000, files=3, seed=13, rate=0.5)
    clicks = generate(clicks_gen)
    orders_gen = GeneratorConfig(stream="orders", events=1500, files=3, seed=14)
    payments_gen = GeneratorConfig(stream="payments", events=1500, files=3, seed=14)
    more = [(orders_gen, generate(orders_gen)), (payments_gen, generate(payments_gen))]
    defs = build_definitions()
    instance = DagsterInstance.ephemeral()
    write_wave(cfg, gen, files, 0)
    write_wave(cfg, rides_gen, rides, 0)
    write_wave(cfg, clicks_gen, clicks, 0)
    for g, f in more:
        write_wave(cfg, g, f, 0)
    first = defs.resolve_job_def("streaming_job").execute_in_process(instance=instance)
    assert first.success
    write_wave(cfg, gen, files, 1)
    write_wave(cfg, rides_gen, rides, 1)
    write_wave(cfg, clicks_gen, clicks, 1)
    for g, f in more:
        write_wave(cfg, g, f, 1)
    from orchestration.recon.recon_partitions import incremental_tags

    result = defs.resolve_job_def("tidemark_all_job").execute_in_process(
        instance=instance, tags=incremental_tags(cfg)
    )
    assert result.success

    return defs, instance, first, result, files


@pytest.mark.slow
def test_whole_graph_materializes_with_metadata_and_passing_checks(spark, cfg, sample, monkeypatch):
    defs, instance, first, result, files = _two_waves_through_the_graph(
        spark, cfg, sample, monkeypatch
    )
    materialized = {
        e.event_specific_data.materialization.asset_key.to_user_string()
        for e in result.get_asset_materialization_events()
    }
    assert materialized == MATERIALIZED

    bronze = read_table(spark, cfg.paths.table("bronze", "transactions")).count()
    quarantined = read_table(spark, cfg.paths.table("quarantine", "transactions")).count()
    assert bronze + quarantined == len(files[0]) + len(files[1])

    def metadata(run, key):
        [event] = [
            e
            for e in run.get_asset_materialization_events()
            if e.event_specific_data.materialization.asset_key == AssetKey(key)
            and DAY_LABEL not in e.event_specific_data.materialization.metadata
        ]
        return {k: v.value for k, v in event.event_specific_data.materialization.metadata.items()}

    wave_1 = metadata(first, ["bronze", "transactions"])
    wave_2 = metadata(result, ["bronze", "transactions"])
    assert wave_1["input_rows"] == len(files[0]) and wave_2["input_rows"] == len(files[1])
    assert wave_1["output_rows"] + wave_2["output_rows"] == bronze
    assert wave_1["quarantined_rows"] + wave_2["quarantined_rows"] == quarantined
    gold = metadata(result, ["gold", "failed_txn_velocity"])
    assert gold["input_rows"] == wave_2["output_rows"]
    for key in (
        "state_rows",
        "state_memory_bytes",
        "late_rows_dropped",
        "watermark",
        "checkpoint_batch_id",
        "duration_seconds",
        "output_rows",
    ):
        assert key in gold
    progress = read_table(spark, cfg.paths.table("ops", "stream_progress")).where(
        "job = 'failed_txn_velocity'"
    )
    assert gold["checkpoint_batch_id"] == progress.agg({"batch_id": "max"}).collect()[0][0]
    # the state per operator, as Spark's state reader sees it in the checkpoint
    checkpoint = str(cfg.paths.checkpoint("failed_txn_velocity"))
    ids = {
        r.operatorName: r.operatorId
        for r in spark.read.format("state-metadata").load(checkpoint).collect()
    }
    tws, dedup_id = ids["transformWithStateInPandasExec"], ids["dedupeWithinWatermark"]
    panes = (
        spark.read.format("statestore")
        .option("operatorId", tws)
        .option("stateVarName", "panes")
        .load(checkpoint)
        .count()
    )
    dedup = spark.read.format("statestore").option("operatorId", dedup_id).load(checkpoint).count()
    parts = cfg.spark.shuffle_partitions
    assert f"| {dedup_id} dedupeWithinWatermark | default | {dedup:,} | {parts} |" in gold["state"]
    assert f"| {tws} transformWithStateInPandasExec | panes" in gold["state"]
    assert f" | {panes:,} | {parts} |" in gold["state"]

    recon = metadata(result, ["recon", "recon_failed_txn_velocity"])
    classes = {
        r.recon_class: r["count"]
        for r in read_table(spark, cfg.paths.dbt_table("recon", "recon_failed_txn_velocity"))
        .groupBy("recon_class")
        .count()
        .collect()
    }
    assert recon["rows_compared"] == sum(classes.values()) > 0
    assert recon["match_rows"] == classes.get("match", 0) and recon["unexplained_rows"] == 0
    assert "| late_dropped |" in recon["recon_classes"]

    evaluations = [
        e.event_specific_data
        for e in result.all_events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
    ]
    assert evaluations
    for ev in evaluations:
        if not ev.asset_check_key.name.startswith("explained_share_at_most"):
            assert ev.passed, ev.asset_check_key
            continue
        # the warning's verdict, against the share counted here from the recon table itself
        job = ev.asset_check_key.asset_key.path[-1].removeprefix("recon_")
        counts = {
            r.recon_class: r["count"]
            for r in read_table(spark, cfg.paths.dbt_table("recon", f"recon_{job}"))
            .groupBy("recon_class")
            .count()
            .collect()
        }
        explained = counts.get("window_open", 0) + counts.get("late_dropped", 0)
        assert not ev.blocking
        assert ev.passed == (explained <= get_job(job).recon_warn_share * sum(counts.values()))
        assert ev.passed or ev.severity == AssetCheckSeverity.WARN
    assert (
        len(
            [
                ev
                for ev in evaluations
                if ev.asset_check_key.name.startswith("explained_share_at_most")
            ]
        )
        == 6
    )
    summary = read_table(spark, cfg.paths.dbt_table("recon", "recon_summary")).collect()
    assert {r.job: r.unexplained_rows for r in summary} == {
        "failed_txn_velocity": 0,
        "zone_revenue_hourly": 0,
        "user_sessions": 0,
        "user_activity_profile": 0,
        "order_payment_match": 0,
        "events_by_type": 0,
    }
    assert all(
        r.rows_compared > 0 and r.late_events_replayed == r.late_events_reported for r in summary
    )

    # The incremental run was labelled with today's partition and, being the first
    # reconciliation, recomputed every day of every job.
    today = dt.datetime.now(dt.timezone.utc).date().isoformat()
    assert instance.get_materialized_partitions(AssetKey(["recon", "recon_summary"])) == {today}
    assert recon["recomputed_from"] == "all"
    # Each day of data it rewrote is labelled too, in the batch and recon tables of the jobs
    # with a day: the partitions of those days read materialized, and no empty day does.
    for job, table in (
        ("failed_txn_velocity", ("recon", "recon_failed_txn_velocity")),
        ("zone_revenue_hourly", ("batch", "int_zone_revenue_hourly__batch")),
    ):
        days = {
            str(r.recon_date)
            for r in read_table(spark, cfg.paths.dbt_table(*table))
            .select("recon_date")
            .distinct()
            .collect()
        }
        in_partitions = {d for d in days if "2025-12-01" <= d <= today}  # the start set above
        assert len(in_partitions) >= 2, (job, days)
        assert instance.get_materialized_partitions(AssetKey(list(table))) == in_partitions | {
            today
        }
    # a job without a day (a profile per user) keeps the run's partition only
    profile = AssetKey(["recon", "recon_user_activity_profile"])
    assert instance.get_materialized_partitions(profile) == {today}

    # dbt ran on what Dagster's load parsed (nothing parsed again), and each of its threads kept
    # one connection to the endpoint (none closed and opened again between nodes)
    log = (cfg.paths.dbt / "target" / f"run-{result.run_id[:8]}" / "dbt.log").read_text()
    assert "Unable to do partial parsing" not in log and "skipping partial parsing" in log
    assert "Opening a new connection" in log and "currently in state closed" not in log


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.own_sql
def test_backfilled_partitions_and_an_idle_run_keep_every_recon_row(
    spark, endpoint_cfg, sample, monkeypatch
):
    # three reconciliations (Dagster's dbt step finds the endpoint): one warm JVM for them
    cfg = endpoint_cfg
    defs, instance, first, result, files = _two_waves_through_the_graph(
        spark, cfg, sample, monkeypatch
    )
    from orchestration.recon.recon_partitions import incremental_tags

    summary = read_table(spark, cfg.paths.dbt_table("recon", "recon_summary")).collect()
    today = dt.datetime.now(dt.timezone.utc).date().isoformat()

    # Partitions chosen by hand (a backfill from the UI): every job with days recomputes from
    # the range's first day at least, though nothing new arrived; so does the profile (keyed
    # state, composed: nothing new changes no user). Days before it are left as they were, so
    # the rows do not change.
    def rows(name):
        return sorted(
            tuple(
                sorted(
                    (k, repr(v))
                    for k, v in r.asDict().items()
                    if k not in ("reconciled_at", "stream_watermark")
                )
            )
            for r in read_table(spark, cfg.paths.dbt_table("recon", name)).collect()
        )

    from orchestration.recon.dbt_models import reconciled_jobs
    from orchestration.recon.dbt_vars import dbt_vars
    from orchestration.recon.recon_scope import NOTHING_NEW

    before = {job: rows(f"recon_{job}") for job in sorted(r.job for r in summary)}
    # what an incremental run would recompute now (open windows, session chains), and so what
    # the backfill must: the earlier of that and its first day
    alone = dbt_vars(reconciled_jobs(), cfg)["recon_from"]
    expected = {
        job: "all" if alone[job] is None else min(alone[job], "2026-01-01") for job in before
    }
    assert any(
        alone[job] in (NOTHING_NEW,) or (alone[job] or "") > "2026-01-01" for job in before
    ), f"the range changes no job's scope: {alone}"
    backfill = defs.resolve_job_def("reconciliation_job").execute_in_process(
        instance=instance,
        tags={
            "dagster/asset_partition_range_start": "2026-01-01",
            "dagster/asset_partition_range_end": "2026-01-03",
        },
    )
    assert backfill.success
    # one materialization per partition of the range, each with the run's metadata
    said = {}
    for event in backfill.get_asset_materialization_events():
        materialization = event.event_specific_data.materialization
        if (
            materialization.asset_key.path[0] == "recon"
            and "recomputed_from" in materialization.metadata
        ):
            job = materialization.asset_key.path[-1].removeprefix("recon_")
            said.setdefault(job, set()).add(materialization.metadata["recomputed_from"].value)
    assert said == {job: {day} for job, day in expected.items()}
    assert expected["user_activity_profile"] == "2026-01-01"  # composed, like a dated job
    assert instance.get_materialized_partitions(AssetKey(["recon", "recon_summary"])) == {
        today,
        "2026-01-01",
        "2026-01-02",
        "2026-01-03",
    }
    assert {job: rows(f"recon_{job}") for job in before} == before

    # One more incremental run with nothing new and no stream batch since: every job is left
    # out (dagster-dbt takes the --exclude into its selection); the shared models still run,
    # and each job's recon table keeps its rows and its last materialization.
    from orchestration.recon.recon_scope import left_out

    now = dbt_vars(reconciled_jobs(), cfg)
    assert set(now["recon_from"].values()) == {NOTHING_NEW}, now["recon_reasons"]
    streams = {s for params in now["jobs"].values() for s in params["sources"]}
    assert sorted(left_out(now)) == sorted(
        [f"int_{job}__batch" for job in before]
        + [f"recon_{job}" for job in before]
        + [f"stg_{stream}" for stream in streams]
    )
    idle = defs.resolve_job_def("reconciliation_job").execute_in_process(
        instance=instance, tags=incremental_tags(cfg)
    )
    assert idle.success
    built = {
        e.event_specific_data.materialization.asset_key.path[-1]
        for e in idle.get_asset_materialization_events()
    }
    assert "recon_summary" in built and "recon_positions" in built
    assert not built & (
        {f"recon_{job}" for job in before}
        | {f"int_{job}__batch" for job in before}
        | {f"stg_{stream}" for stream in streams}
    )
    assert {job: rows(f"recon_{job}") for job in before} == before


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_webserver_serves_every_asset_over_graphql(cfg, tmp_path):
    port = _free_port()
    env = {
        **os.environ,
        "DAGSTER_HOME": str(tmp_path / "dagster_home"),
        "TIDEMARK_DATA_ROOT": str(cfg.data_root),
    }
    webserver = str(Path(sys.executable).with_name("dagster-webserver"))
    log = (tmp_path / "webserver.log").open("w")
    proc = subprocess.Popen(
        [webserver, "-h", "127.0.0.1", "-p", str(port), "-w", "workspace.yaml"],
        cwd=CHECKOUT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/graphql"
    query = "{ assetNodes { assetKey { path } } }"
    try:
        deadline, keys = time.monotonic() + 180, set()
        while time.monotonic() < deadline and keys != EXPECTED_ASSETS:
            assert proc.poll() is None, (tmp_path / "webserver.log").read_text()[-3000:]
            try:
                reply = requests.post(url, json={"query": query}, timeout=10).json()
                keys = {"/".join(n["assetKey"]["path"]) for n in reply["data"]["assetNodes"]}
            except (requests.ConnectionError, KeyError, TypeError, ValueError):
                pass
            time.sleep(1)
        assert keys == EXPECTED_ASSETS
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _started(run):
    from dagster import DagsterEvent, DagsterEventType

    return DagsterEvent(DagsterEventType.RUN_START.value, job_name=run.job_name)


def test_reconciliation_schedule_requests_the_reconciliation_job(cfg, monkeypatch):
    from dagster import build_schedule_context

    from orchestration.definitions import build_definitions
    from streaming_jobs.core.config import ConfigError, TidemarkConfig

    defs = build_definitions()
    schedule = defs.resolve_schedule_def("reconciliation_schedule")
    assert schedule.cron_schedule == "0 * * * *" and schedule.execution_timezone == "UTC"
    (cfg.data_root / "instance").mkdir()
    instance = DagsterInstance.local_temp(str(cfg.data_root / "instance"))
    tick = schedule.evaluate_tick(
        build_schedule_context(instance=instance, repository_def=defs.get_repository_def())
    )
    assert len(tick.run_requests) == 1 and schedule.job_name == "reconciliation_job"
    assert tick.run_requests[0].job_name in (None, "reconciliation_job")  # None: the schedule's own
    assert tick.run_requests[0].tags["tidemark/reconciliation"] == "1"
    # incremental, labelled with today's day of event time (UTC)
    assert tick.run_requests[0].tags["tidemark/recon"] == "incremental"
    assert tick.run_requests[0].partition_key == dt.datetime.now(dt.timezone.utc).date().isoformat()
    # A reconciliation still queued or running: the tick is skipped, runs never pile up.
    from dagster import DagsterRunStatus

    recon_job = defs.resolve_job_def("reconciliation_job")
    run = instance.create_run_for_job(
        recon_job, status=DagsterRunStatus.NOT_STARTED, tags=recon_job.tags
    )  # as the UI launches it
    instance.run_storage.handle_run_event(run.run_id, _started(run))  # the run is now STARTED
    skipped = schedule.evaluate_tick(
        build_schedule_context(instance=instance, repository_def=defs.get_repository_def())
    )
    assert not skipped.run_requests and "is still started" in skipped.skip_message
    job = defs.resolve_job_def("reconciliation_job")
    selected = {k.to_user_string() for k in job.asset_layer.executable_asset_keys}
    assert "recon/recon_failed_txn_velocity" in selected
    assert not {k for k in selected if k.split("/")[0] in ("bronze", "gold")}

    monkeypatch.setenv("TIDEMARK_RECON_CRON", "*/15 * * * *")
    every_15 = build_definitions()
    assert every_15.resolve_schedule_def("reconciliation_schedule").cron_schedule == "*/15 * * * *"
    # the command line refuses a malformed cron by name (read strictly); the code location runs
    # the default schedule and alerts instead (tests/orchestration/test_isolation.py)
    with pytest.raises(ConfigError, match="TIDEMARK_RECON_CRON"):
        TidemarkConfig.from_env({**os.environ, "TIDEMARK_RECON_CRON": "hourly"})
    monkeypatch.setenv("TIDEMARK_RECON_CRON", "hourly")
    fallback = build_definitions()
    assert fallback.resolve_schedule_def("reconciliation_schedule").cron_schedule == "0 * * * *"


def test_freshness_policies_schedules_and_sensors_are_on_in_a_fresh_instance(cfg):
    from datetime import timedelta

    from dagster import DefaultScheduleStatus, DefaultSensorStatus

    from orchestration.definitions import build_definitions

    defs = build_definitions()
    graph = defs.resolve_asset_graph()
    # derived from the spec: warn at the watermark delay (10 min), fail at three times that
    policy = graph.get(AssetKey(["gold", "failed_txn_velocity"])).freshness_policy
    assert (policy.warn_window.to_timedelta(), policy.fail_window.to_timedelta()) == (
        timedelta(minutes=10),
        timedelta(minutes=30),
    )
    # the TTL job drops late events at its 10-minute watermark too: the lateness it tolerates
    ttl_job = graph.get(AssetKey(["gold", "user_activity_profile"])).freshness_policy
    assert ttl_job.warn_window.to_timedelta() == timedelta(minutes=10)
    assert graph.get(AssetKey(["bronze", "clicks"])).freshness_policy is not None
    # nothing to switch on by hand: every schedule and sensor runs in a new instance
    for name in ("reconciliation_schedule", "savepoint_schedule", "maintenance_schedule"):
        assert defs.resolve_schedule_def(name).default_status == DefaultScheduleStatus.RUNNING
    for name in (
        "checkpoint_health_sensor",
        "platform_health_sensor",
        "state_size_sensor",
        "streaming_restart_sensor",
        "reconcile_on_update_sensor",
    ):
        assert defs.resolve_sensor_def(name).default_status == DefaultSensorStatus.RUNNING


def test_incremental_updates_request_reconciliation_and_continuous_reports_do_not(cfg):
    from dagster import AssetMaterialization, evaluate_automation_conditions, job, op

    from orchestration.lib.concurrency import CONTINUOUS_TAG
    from orchestration.definitions import build_definitions

    defs = build_definitions()
    instance = DagsterInstance.ephemeral()

    @op
    def report(context):
        context.log_event(AssetMaterialization(AssetKey(["gold", "events_by_type"])))

    @job(tags={CONTINUOUS_TAG: "1"})
    def like_a_continuous_run():
        report()

    @job
    def like_an_incremental_run():
        report()

    # everything reconciled once today (reported here rather than built: dbt is not what is
    # tested); automation requests today's partition only
    graph = defs.resolve_asset_graph()
    # every evaluation at one instant: "today" cannot change under the test at midnight
    now = dt.datetime.now(dt.timezone.utc)
    today = now.date().isoformat()
    for key in graph.get_all_asset_keys():
        if key.path[0] in ("staging", "batch", "recon"):
            instance.report_runless_asset_event(AssetMaterialization(key, partition=today))
        if key.path[0] == "gold":  # every job has run
            instance.report_runless_asset_event(AssetMaterialization(key))
    first = evaluate_automation_conditions(defs=defs, instance=instance, evaluation_time=now)
    recon = AssetKey(["recon", "recon_events_by_type"])
    assert like_a_continuous_run.execute_in_process(instance=instance).success
    after_continuous = evaluate_automation_conditions(
        defs=defs, instance=instance, evaluation_time=now, cursor=first.cursor
    )
    assert after_continuous.get_num_requested(recon) == 0
    # What a reconciliation built requests nothing, also when it built part of the graph only
    # (still running, or failed half way): no recon model rebuilt without its batch model, no
    # summary of half a reconciliation (the soak of 2026-11-24 saw both before this rule).
    from orchestration.lib.concurrency import RECON_TAG

    built = [
        AssetKey(["batch", "int_user_sessions__batch"]),
        AssetKey(["recon", "recon_user_sessions"]),
        AssetKey(["batch", "int_late_events"]),
    ]

    @op
    def reconcile_part(context):
        for key in built:
            context.log_event(AssetMaterialization(key, partition=today))

    @job(tags={RECON_TAG: "1"})
    def like_half_a_reconciliation():
        reconcile_part()

    assert like_half_a_reconciliation.execute_in_process(instance=instance).success
    after_recon = evaluate_automation_conditions(
        defs=defs, instance=instance, evaluation_time=now, cursor=after_continuous.cursor
    )
    assert after_recon.total_requested == 0, {
        k.to_user_string() for k in graph.get_all_asset_keys() if after_recon.get_num_requested(k)
    }

    assert like_an_incremental_run.execute_in_process(instance=instance).success
    after_incremental = evaluate_automation_conditions(
        defs=defs, instance=instance, evaluation_time=now, cursor=after_recon.cursor
    )
    assert after_incremental.get_num_requested(recon) == 1
    assert after_incremental.get_requested_partitions(recon) == {today}
    # ...with the batch models it compares against, though bronze did not change: they are
    # bounded by the position gold reached (once rebuilt alone, after a recovery run, every
    # row gold had gained read as missing_in_batch)
    for batch in ("int_events_by_type__batch", "int_late_events"):
        assert after_incremental.get_requested_partitions(AssetKey(["batch", batch])) == {today}
    assert after_incremental.get_num_requested(AssetKey(["batch", "int_user_sessions__batch"])) == 0
    # ...with its dbt tests, in the same run: automation requests assets, and without their
    # checks a clean reconciliation left every recon asset's badge at "0/5 Passed"
    requested_checks = {
        r.key.name
        for r in after_incremental.results
        if isinstance(r.key, AssetCheckKey) and r.true_subset.size
    }
    checks_of_recon = {c.name for c in graph.asset_check_keys if c.asset_key == recon}
    assert len(checks_of_recon) == 5 and checks_of_recon <= requested_checks


def test_a_new_day_alone_starts_no_partial_reconciliation(cfg):
    """Midnight (UTC) opens a new day's partition of every dbt asset: missing, nothing changed.
    The sensor may build the views of the ops tables for it (nothing else depends on a run),
    but never a batch or recon model or the summary by itself. An incremental run's update on
    the new day then requests its chain, in one run."""
    from dagster import AssetMaterialization, evaluate_automation_conditions, job, op

    from orchestration.lib.concurrency import RECON_TAG
    from orchestration.definitions import build_definitions

    defs = build_definitions()
    instance = DagsterInstance.ephemeral()
    graph = defs.resolve_asset_graph()
    dbt_keys = [k for k in graph.get_all_asset_keys() if k.path[0] in ("staging", "batch", "recon")]
    for key in dbt_keys:  # reconciled on 2026-03-01
        instance.report_runless_asset_event(AssetMaterialization(key, partition="2026-03-01"))

    def at(hour: int, minute: int, day: int = 1, cursor=None):
        return evaluate_automation_conditions(
            defs=defs,
            instance=instance,
            cursor=cursor,
            evaluation_time=dt.datetime(2026, 3, day, hour, minute, tzinfo=dt.timezone.utc),
        )

    def requested(result) -> set[str]:
        return {k.to_user_string() for k in dbt_keys if result.get_num_requested(k)}

    evening = at(23, 50)
    late = at(23, 55, cursor=evening.cursor)
    assert late.total_requested == 0
    cursor, built = late.cursor, set()
    for minute in range(0, 5):  # the first ticks of the new day
        tick = at(0, minute, day=2, cursor=cursor)
        built |= requested(tick)
        cursor = tick.cursor
    assert built <= {"staging/stg_stream_progress", "staging/stg_stream_late_rows"}, built

    @op
    def build_them(context):  # what the sensor's run (tagged as a reconciliation) reports
        for key in built:
            context.log_event(
                AssetMaterialization(AssetKey(key.split("/")), partition="2026-03-02")
            )

    @job(tags={RECON_TAG: "1"})
    def like_the_sensors_run():
        build_them()

    @op
    def report(context):
        context.log_event(AssetMaterialization(AssetKey(["gold", "events_by_type"])))
        context.log_event(AssetMaterialization(AssetKey(["bronze", "clicks"])))

    @job
    def like_an_incremental_run():
        report()

    assert like_the_sensors_run.execute_in_process(instance=instance).success
    quiet = at(0, 6, day=2, cursor=cursor)
    assert quiet.total_requested == 0, requested(quiet)
    assert like_an_incremental_run.execute_in_process(instance=instance).success
    update = at(0, 10, day=2, cursor=quiet.cursor)
    # (the summary waits for every job's recon of the new day: the schedule's run)
    assert {
        "staging/stg_clicks",
        "batch/int_events_by_type__batch",
        "recon/recon_events_by_type",
    } <= requested(update), requested(update)
    assert update.get_requested_partitions(AssetKey(["recon", "recon_events_by_type"])) == {
        "2026-03-02"
    }
