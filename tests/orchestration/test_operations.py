"""Sensors, savepoints and recovery with real queries, checkpoints and sensor evaluations."""

from __future__ import annotations

import json
from pathlib import Path
import subprocess
import sys

import pytest
from dagster import DagsterInstance, build_sensor_context

import scenarios
from helpers import click, dbt, fail_bronze_batch, land, on_store
from streaming_jobs.core import locations
from streaming_jobs.core.locations import Location
from streaming_jobs.storage.registry import get_job
from streaming_jobs.storage.lake import read_table, spark_path
from streaming_jobs.operations import alerts, savepoints
from streaming_jobs.operations.health import check_checkpoint
from streaming_jobs.operations.state import inspect
from streaming_jobs.runtime.runner import run_bronze, run_job

from orchestration.defs.ops.jobs import recovery_job
from orchestration.lib.resources import TidemarkResource, TidemarkSparkResource
from orchestration.defs.ops.sensors import checkpoint_health_sensor, state_size_sensor
from orchestration.lib.evaluations import CHECKPOINT_CHECK, STATE_CHECK
from orchestration.recon.recon_report import UNEXPLAINED

VELOCITY = "failed_txn_velocity"


@pytest.fixture
def instance(tmp_path):
    (tmp_path / "dagster").mkdir()
    return DagsterInstance.local_temp(str(tmp_path / "dagster"))


def resources(cfg):
    return {
        "tidemark": TidemarkResource(data_root=str(cfg.data_root)),
        "pyspark": TidemarkSparkResource(spark_config={}, data_root=str(cfg.data_root)),
    }


def evaluations(result, check: str) -> dict[str, object]:
    return {
        e.asset_key.path[-1]: e
        for e in result.asset_events
        if getattr(e, "check_name", None) == check
    }


def incidents(spark, cfg, prefix: str) -> list[dict]:
    return [r for r in alerts.load(cfg) if r["dedup_key"].startswith(prefix)]


def _break_newest_offsets(checkpoint) -> int:
    """Overwrite the checkpoint's newest offsets file with garbage (a torn write, a bad disk),
    on a local disk or on the store; its batch id."""
    offsets = Location.of(checkpoint) / "offsets"
    latest = max(int(name) for name in locations.names(offsets) if name.isdigit())
    locations.write_bytes(offsets / str(latest), b"\x00\x00garbage")
    return latest


def _corrupt_and_recover(spark, cfg, instance) -> int:
    """Two waves with a savepoint between; the latest offsets file broken; the sensor's alert and
    recovery run; the incident resolved. Returns the late rows the job dropped."""
    spec = get_job(VELOCITY)
    scenarios.land_wave(cfg, 1)
    run_bronze(spark, cfg, "transactions")
    late = run_job(spark, cfg, spec).late_rows_dropped
    point = savepoints.take(cfg, VELOCITY)
    scenarios.land_wave(cfg, 2)
    run_bronze(spark, cfg, "transactions")
    second = run_job(spark, cfg, spec)
    late += second.late_rows_dropped
    assert second.checkpoint_batch_id > point.batch_id  # batches after the savepoint exist
    # A healthy system: the sensor finds nothing and requests nothing.
    healthy = checkpoint_health_sensor(
        build_sensor_context(resources=resources(cfg), instance=instance)
    )
    assert healthy.run_requests == []
    assert all(e.passed for e in evaluations(healthy, CHECKPOINT_CHECK).values())

    # The latest offsets file is overwritten with garbage (a torn write, a bad disk).
    latest = _break_newest_offsets(cfg.paths.checkpoint(VELOCITY))

    first = checkpoint_health_sensor(
        build_sensor_context(resources=resources(cfg), instance=instance)
    )
    verdict = evaluations(first, CHECKPOINT_CHECK)[VELOCITY]
    assert not verdict.passed and f"offsets/{latest}" in verdict.metadata["details"].value
    assert [e.passed for j, e in evaluations(first, CHECKPOINT_CHECK).items() if j != VELOCITY] == [
        True
    ] * 5
    assert len(first.run_requests) == 1
    request = first.run_requests[0]
    assert request.run_config["ops"]["recover"]["config"] == {"job": VELOCITY, "restore": True}
    opened = incidents(spark, cfg, f"checkpoint:{VELOCITY}")
    assert [(r["kind"], r["severity"], r["resolved_at"]) for r in opened] == [
        ("checkpoint_corrupt", "critical", None)
    ]
    # the alert says what mends it: the savepoint the recovery run restores
    assert f"its latest savepoint {point.path.name}" in opened[0]["message"]
    # Evaluated again before recovery: the same incident (no second alert), the same run key.
    again = checkpoint_health_sensor(
        build_sensor_context(resources=resources(cfg), instance=instance)
    )
    assert [r.run_key for r in again.run_requests] == [request.run_key]
    assert len(incidents(spark, cfg, f"checkpoint:{VELOCITY}")) == 1

    # The requested recovery run restores the savepoint and catches up from bronze.
    result = recovery_job.execute_in_process(
        run_config=request.run_config, resources=resources(cfg), instance=instance
    )
    assert result.success
    gold = read_table(spark, cfg.paths.table("gold", VELOCITY))
    got = {(r.user_id, r.window_start, r.window_end): r.failed_count for r in gold.collect()}
    assert gold.count() == len(got) == len(scenarios.expected_stream_rows())
    assert got == scenarios.expected_stream_rows()
    replaced = list((cfg.paths.checkpoints / ".replaced").iterdir())
    assert len(replaced) == 1  # the broken checkpoint is kept for inspection

    after = checkpoint_health_sensor(
        build_sensor_context(resources=resources(cfg), instance=instance)
    )
    assert after.run_requests == [] and evaluations(after, CHECKPOINT_CHECK)[VELOCITY].passed
    [row] = incidents(spark, cfg, f"checkpoint:{VELOCITY}")
    assert row["resolved_at"] is not None and alerts.owed(row) is None  # resolution delivered
    return late


@pytest.mark.slow
def test_corrupted_checkpoint_is_found_alerted_and_restored_from_the_latest_savepoint(
    spark, cfg, instance
):
    _corrupt_and_recover(spark, cfg, instance)


@pytest.mark.slow
@pytest.mark.long  # CI's budget (about 45 s): CI keeps the recovery, gold checked row by row
def test_a_job_restored_from_a_savepoint_reconciles_with_its_late_events_accounted(
    spark, cfg, instance
):
    """The reconciliation of the recovered job (its models and tests, the late accounting):
    nothing unexplained, and the late events replayed from bronze are the ones reported."""
    late = _corrupt_and_recover(spark, cfg, instance)
    built = dbt(
        "build", "--select", f"+recon_{VELOCITY}", "+int_late_events", "--exclude", "test_type:unit"
    )
    assert built.returncode == 0, built.stdout[-3000:]
    classes = {
        r.recon_class
        for r in read_table(spark, cfg.paths.dbt_table("recon", f"recon_{VELOCITY}")).collect()
    }
    assert "match" in classes and not classes & set(UNEXPLAINED)
    counts = (
        read_table(spark, cfg.paths.dbt_table("batch", "int_late_events"))
        .where(f"job = '{VELOCITY}'")
        .collect()
    )
    assert [(r.late_events_replayed, r.late_events_reported) for r in counts] == [(late, late)]


SMALL_STATE_JOB = '''"""clicks_small_state: events_by_type with tiny state thresholds (a test job)."""
from dataclasses import replace

from streaming_jobs.jobs.events_by_type import SPEC as BASE
from streaming_jobs.jobs.events_by_type import build  # noqa: F401
from streaming_jobs.spec import StateThresholds

SPEC = replace(BASE, name="clicks_small_state", partition_by=(), table_properties={},
               thresholds=StateThresholds(warn_rows=20, critical_rows=1000))
'''


@pytest.mark.slow
def test_state_over_warn_raises_one_alert_and_one_resolution(
    spark, cfg, instance, tmp_path, monkeypatch
):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "clicks_small_state.py").write_text(SMALL_STATE_JOB)
    monkeypatch.setenv("TIDEMARK_JOBS_PATH", str(jobs))
    spec = get_job("clicks_small_state")
    checkpoint = str(cfg.paths.checkpoint(spec.name))

    def dedup_rows() -> int:  # the state store itself, read by Spark's state reader
        return spark.read.format("statestore").load(checkpoint).count()

    # 30 distinct clicks within a minute: all stay in dedup state (watermark 10 minutes).
    land(cfg, "a.jsonl", [click(f"a{i}", "u1", i / 60) for i in range(30)], stream="clicks")
    run_bronze(spark, cfg, "clicks")
    run_job(spark, cfg, spec)
    assert dedup_rows() == 30
    ticks = [
        state_size_sensor(
            build_sensor_context(resources=resources(cfg), instance=instance, cursor=None)
        )
    ]
    observed = [
        e
        for e in ticks[0].asset_events
        if e.asset_key.path[-1] == spec.name and type(e).__name__ == "AssetObservation"
    ]
    assert [o.metadata["state_rows"].value for o in observed] == [30]
    for _ in range(3):  # still over: more evaluations, no new alert, no repeated observation
        ticks.append(
            state_size_sensor(
                build_sensor_context(
                    resources=resources(cfg), instance=instance, cursor=ticks[-1].cursor
                )
            )
        )
    assert not any(
        type(e).__name__ == "AssetObservation" and e.asset_key.path[-1] == spec.name
        for t in ticks[1:]
        for e in t.asset_events
    )
    assert all(not evaluations(t, STATE_CHECK)[spec.name].passed for t in ticks)
    [row] = incidents(spark, cfg, f"state:{spec.name}:state_size")
    assert row["severity"] == "warning" and row["seen_count"] == 4 and row["resolved_at"] is None
    assert "30 > warning threshold 20" in row["message"] and alerts.owed(row) is None

    # An hour later: the watermark passes the first clicks and they leave state.
    land(cfg, "b.jsonl", [click(f"b{i}", "u1", 60 + i / 60) for i in range(5)], stream="clicks")
    run_bronze(spark, cfg, "clicks")
    run_job(spark, cfg, spec)
    assert dedup_rows() == 5
    for _ in range(2):
        ticks.append(
            state_size_sensor(
                build_sensor_context(
                    resources=resources(cfg), instance=instance, cursor=ticks[-1].cursor
                )
            )
        )
    assert evaluations(ticks[-1], STATE_CHECK)[spec.name].passed
    [row] = incidents(spark, cfg, f"state:{spec.name}:state_size")
    assert row["resolved_at"] is not None and alerts.owed(row) is None
    assert "under warn thresholds" in row["resolution"]
    # The built-in jobs never ran here: no readings, no alerts for them.
    assert {r["job"] for r in alerts.load(cfg)} == {spec.name}


@pytest.mark.slow
def test_savepoints_are_kept_few_inspected_and_a_missing_savepoint_is_explained(spark, cfg):
    spec = get_job("events_by_type")
    for wave in range(4):
        land(
            cfg,
            f"w{wave}.jsonl",
            [click(f"w{wave}-{i}", f"u{i % 4}", wave * 2 + i / 10) for i in range(6)],
            stream="clicks",
        )
        run_bronze(spark, cfg, "clicks")
        run_job(spark, cfg, spec)
        savepoints.take(cfg, spec.name, keep=2)
    kept = savepoints.savepoints(cfg, spec.name)
    assert len(kept) == 2 and kept[0].batch_id < kept[1].batch_id
    info = json.loads((kept[-1].path.path / "savepoint.json").read_text())
    assert info["gold_version"] == kept[-1].gold_version
    assert check_checkpoint(cfg, spec.name, spec.sources) == []

    [op] = inspect(spark, cfg, spec.name, top=3)
    parts = cfg.spark.shuffle_partitions
    assert op.operator == "dedupeWithinWatermark" and op.partitions == parts
    # every click of the last 10 minutes of event time is still in dedup state
    assert (
        op.rows
        == spark.read.format("statestore").load(spark_path(cfg.paths.checkpoint(spec.name))).count()
        > 0
    )
    assert len(op.largest) == 3 and "event_id" in op.largest[0][0]
    # the largest values' sizes, measured here from the state's rows as JSON
    held = (
        spark.read.format("statestore").load(spark_path(cfg.paths.checkpoint(spec.name))).collect()
    )
    sizes = sorted(
        (len(json.dumps({"value": r.value.asDict(True)}, separators=(",", ":"))) for r in held),
        reverse=True,
    )
    assert [size for _, size in op.largest] == sizes[:3]
    # the runbook's command for a state alert, in a process of its own (no stream ever ran in
    # its session): the same operator and rows
    shown = subprocess.run(
        [str(Path(sys.executable).with_name("tidemark")), "state", spec.name, "--top", "3"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert (
        f"{spec.name} operator {op.operator_id} dedupeWithinWatermark (store default): "
        f"{op.rows:,} rows, {parts} partitions"
    ) in shown.stdout, shown.stdout

    with pytest.raises(savepoints.SavepointError, match="no savepoint"):
        savepoints.restore(spark, cfg, "user_sessions")


def _on_store(spark, cfg, request, monkeypatch):
    """``cfg`` with its data root in a bucket of the test's own on the project's S3 server, set
    for Spark and, through the environment, for what reads the settings there (a sensor's
    resource, the command line)."""
    cfg = on_store(spark, cfg, request.getfixturevalue("s3_bucket"))
    monkeypatch.setenv("TIDEMARK_DATA_ROOT", str(cfg.data_root))
    monkeypatch.setenv("TIDEMARK_S3_HOME", str(cfg.s3.home))
    monkeypatch.setenv("TIDEMARK_S3_PORT", str(cfg.s3.port))
    return cfg


@pytest.mark.slow
@pytest.mark.parametrize("where", ["local", "store"])
def test_a_broken_checkpoint_without_a_savepoint_is_alerted_with_the_rebuild_that_mends_it(
    spark, cfg, instance, capsys, where, request, monkeypatch
):
    """No savepoint to restore: the sensor starts no recovery run (it could only fail), and its
    alert, its check and `tidemark health` name the command that rebuilds the job from bronze.
    A recovery run started by hand fails naming it too. That command, run as said, gives a job
    that streams again with every click once, and the alert resolves. On a local disk and with
    the data root on the project's S3 server."""
    from argparse import Namespace

    from orchestration.cli import operate

    if where == "store":
        cfg = _on_store(spark, cfg, request, monkeypatch)
    spec = get_job("events_by_type")
    clicks = [click(f"c{i}", f"u{i % 3}", i / 2) for i in range(10)]
    land(cfg, "a.jsonl", clicks, stream="clicks")
    run_bronze(spark, cfg, "clicks")
    run_job(spark, cfg, spec)
    latest = _break_newest_offsets(cfg.paths.checkpoint(spec.name))
    command = f"tidemark rebuild {spec.name} --from-scratch --force"

    tick = checkpoint_health_sensor(
        build_sensor_context(resources=resources(cfg), instance=instance)
    )
    assert tick.run_requests == []
    verdict = evaluations(tick, CHECKPOINT_CHECK)[spec.name]
    assert not verdict.passed and f"'{command}'" in verdict.metadata["details"].value
    [alert] = incidents(spark, cfg, f"checkpoint:{spec.name}")
    assert alert["kind"] == "checkpoint_corrupt" and f"offsets/{latest}" in alert["message"]
    assert f"no savepoint to restore under {cfg.paths.savepoints / spec.name}" in alert["message"]
    assert f"'{command}'" in alert["message"]

    capsys.readouterr()
    assert operate.health(cfg, Namespace()) == 1
    shown = capsys.readouterr().out
    assert f"[critical] checkpoint_corrupt: {spec.name}: no savepoint to restore" in shown, shown
    assert "restore the job's latest savepoint" not in shown  # the old advice, wrong here
    assert shown.splitlines()[-1].startswith(f"critical findings on {spec.name}: ")

    by_hand = recovery_job.execute_in_process(
        run_config={"ops": {"recover": {"config": {"job": spec.name, "restore": True}}}},
        resources=resources(cfg),
        instance=instance,
        raise_on_error=False,
    )
    assert not by_hand.success
    [failure] = [e for e in by_hand.all_events if e.event_type_value == "STEP_FAILURE"]
    error = failure.event_specific_data.error  # Dagster's step error; the op's is its cause
    assert "no savepoint" in error.cause.message and f"'{command}'" in error.cause.message

    assert operate.rebuild(cfg, Namespace(job=spec.name, from_scratch=True, force=True)) == 0
    more = [click(f"d{i}", "u1", 6 + i / 2) for i in range(3)]
    land(cfg, "b.jsonl", more, stream="clicks")
    run_bronze(spark, cfg, "clicks")
    run_job(spark, cfg, spec)
    ids = [r.event_id for r in read_table(spark, cfg.paths.table("gold", spec.name)).collect()]
    assert sorted(ids) == sorted(e["event_id"] for e in clicks + more)
    after = checkpoint_health_sensor(
        build_sensor_context(resources=resources(cfg), instance=instance)
    )
    assert after.run_requests == [] and evaluations(after, CHECKPOINT_CHECK)[spec.name].passed
    [alert] = incidents(spark, cfg, f"checkpoint:{spec.name}")
    assert alert["resolved_at"] is not None

    # an ingestion's checkpoint has no savepoints, and a committed batch's positions torn
    # cannot be set aside (tests/streaming/test_repair.py: what `tidemark repair` mends)
    latest = _break_newest_offsets(cfg.paths.checkpoint("bronze_clicks"))
    tick = checkpoint_health_sensor(
        build_sensor_context(resources=resources(cfg), instance=instance)
    )
    assert tick.run_requests == []
    [alert] = incidents(spark, cfg, "checkpoint:bronze_clicks")
    assert alert["kind"] == "checkpoint_corrupt" and f"offsets/{latest}" in alert["message"]
    assert f"offsets/{latest} is unreadable, and batch {latest} was committed" in alert["message"]
    assert "put the file back from a backup" in alert["message"]


def _asked_once(cfg, instance):
    """The one recovery run two sensor ticks request for an incident (the same run key)."""
    ticks = [
        checkpoint_health_sensor(build_sensor_context(resources=resources(cfg), instance=instance))
        for _ in range(2)
    ]
    [asked] = ticks[0].run_requests
    assert [r.run_key for r in ticks[1].run_requests] == [asked.run_key]  # one per incident
    assert asked.job_name == "recovery_job"
    return asked


def _set_aside_and_resolved(spark, cfg, instance, query: str) -> None:
    """After a repair: the torn file kept under ``.replaced``, the next tick requests nothing,
    and the incident is resolved."""
    kept = locations.names(Location.of(cfg.paths.checkpoints) / ".replaced")
    assert len(kept) == 1 and kept[0].startswith(f"{query}-repair-")
    after = checkpoint_health_sensor(
        build_sensor_context(resources=resources(cfg), instance=instance)
    )
    assert after.run_requests == []
    [alert] = incidents(spark, cfg, f"checkpoint:{query}")
    assert alert["resolved_at"] is not None


@pytest.mark.slow
@pytest.mark.parametrize("where", ["local", "store"])
def test_a_torn_ingestion_checkpoint_is_repaired_by_the_run_the_sensor_starts(
    spark, cfg, instance, where, request, monkeypatch
):
    """An ingestion's batch planned, and the machine down before it wrote anything, its offsets
    file torn: the sensor's alert says the repair, and it requests one recovery run for the
    incident. The run sets the file aside and ingests what waited: every landed click in bronze
    and the bad line in quarantine, each once; the alert resolves. On a local disk and with the
    data root on the project's S3 server."""
    from streaming_jobs.runtime.runner import StreamRunError

    if where == "store":
        cfg = _on_store(spark, cfg, request, monkeypatch)
    query = "bronze_clicks"
    first = [click(f"a{i}", "u1", i) for i in range(4)]
    land(cfg, "a.jsonl", first, stream="clicks")
    assert run_bronze(spark, cfg, "clicks").checkpoint_batch_id == 0
    then = [click(f"b{i}", "u2", 10 + i) for i in range(3)]
    land(cfg, "b.jsonl", [*then, "{torn"], stream="clicks")
    with monkeypatch.context() as patch:  # batch 1 fails before it writes anything
        fail_bronze_batch(patch, after_write=False)
        with pytest.raises(StreamRunError):
            run_bronze(spark, cfg, "clicks")
    assert _break_newest_offsets(cfg.paths.checkpoint(query)) == 1

    asked = _asked_once(cfg, instance)
    assert asked.run_config["ops"]["recover"]["config"] == {"job": query}
    assert f".dagster/tidemark/checkpoint.{query}" in asked.tags
    [alert] = incidents(spark, cfg, f"checkpoint:{query}")
    assert alert["kind"] == "checkpoint_corrupt" and alert["resolved_at"] is None
    assert "checkpoint_health_sensor starts it while no run owns" in alert["message"]
    assert "offsets/1 is set aside by the next run's start" in alert["message"]

    result = recovery_job.execute_in_process(
        run_config=asked.run_config, resources=resources(cfg), instance=instance
    )
    assert result.success
    [done] = result.asset_materializations_for_node("recover")
    assert done.asset_key.path[-1] == "clicks" and done.description == "recovered by a repair"
    bronze = read_table(spark, cfg.paths.table("bronze", "clicks")).select("event_id").collect()
    assert sorted(r.event_id for r in bronze) == sorted(e["event_id"] for e in first + then)
    bad = read_table(spark, cfg.paths.table("quarantine", "clicks")).select("raw_line").collect()
    assert [r.raw_line for r in bad] == ["{torn"]
    _set_aside_and_resolved(spark, cfg, instance, query)


@pytest.mark.slow
@pytest.mark.parametrize("where", ["local", "store"])
def test_a_jobs_torn_newest_commit_is_repaired_before_its_savepoint_is_restored(
    spark, cfg, instance, where, request, monkeypatch
):
    """A job's batch written to gold, and the machine down before its commit file was whole:
    the least that mends it is the crash's own recovery, the batch run again from the same
    positions and state. The alert says it (not the older savepoint); while a continuous run
    owns the checkpoint the sensor leaves the file to that run's start, and once none does it
    requests one repair run for the incident, which sets the file aside and runs the job: every
    landed click in gold once, the alert resolved. A job's torn offsets file is not set aside
    (its savepoint mends it). On a local disk and with the data root on the project's S3
    server."""
    from argparse import Namespace

    from orchestration.cli import operate

    if where == "store":
        cfg = _on_store(spark, cfg, request, monkeypatch)
    job = "events_by_type"
    spec = get_job(job)
    first = [click(f"a{i}", "u1", i) for i in range(4)]
    land(cfg, "a.jsonl", first, stream="clicks")
    run_bronze(spark, cfg, "clicks")
    saved = run_job(spark, cfg, spec).checkpoint_batch_id
    point = savepoints.take(cfg, job)
    then = [click(f"b{i}", "u2", 10 + i) for i in range(3)]
    land(cfg, "b.jsonl", then, stream="clicks")
    run_bronze(spark, cfg, "clicks")
    newest = run_job(spark, cfg, spec).checkpoint_batch_id
    assert newest > saved == point.batch_id
    checkpoint = Location.of(cfg.paths.checkpoint(job))
    locations.write_bytes(checkpoint / "commits" / str(newest), b'v1\n{"nextBatchWa')

    # while a continuous run owns the checkpoint, it sets the file aside at its start: a
    # recovery run asked now would only queue behind it
    from dagster import DagsterRunStatus

    from orchestration.defs.streaming.jobs import continuous_streaming_job

    host = continuous_streaming_job()
    hosting = instance.create_run_for_job(
        job_def=host, run_config={}, status=DagsterRunStatus.STARTED, tags=host.tags
    )
    tick = checkpoint_health_sensor(
        build_sensor_context(resources=resources(cfg), instance=instance)
    )
    assert tick.run_requests == []
    instance.report_run_failed(hosting)
    asked = _asked_once(cfg, instance)
    assert asked.run_config["ops"]["recover"]["config"] == {
        "job": job,
        "restore": False,
        "repair": True,
    }
    assert {f".dagster/tidemark/checkpoint.{q}" for q in (job, "bronze_clicks")} <= set(asked.tags)
    [alert] = incidents(spark, cfg, f"checkpoint:{job}")
    assert "checkpoint_health_sensor starts it while no run owns" in alert["message"]
    assert f"commits/{newest} is set aside by the next run's start" in alert["message"]
    assert point.path.name not in alert["message"]  # the savepoint would undo more batches

    result = recovery_job.execute_in_process(
        run_config=asked.run_config, resources=resources(cfg), instance=instance
    )
    assert result.success
    [done] = result.asset_materializations_for_node("recover")
    assert done.asset_key.path[-1] == job and done.description == "recovered by a repair"
    gold = read_table(spark, cfg.paths.table("gold", job)).select("event_id").collect()
    assert sorted(r.event_id for r in gold) == sorted(e["event_id"] for e in first + then)
    _set_aside_and_resolved(spark, cfg, instance, job)

    # a job's torn offsets file: refused by hand, and its savepoint is what the alert names
    latest = _break_newest_offsets(checkpoint)
    with pytest.raises(operate.OperationError, match=f"offsets/{latest} is unreadable"):
        operate.repair(cfg, Namespace(query=job))
    [request_] = checkpoint_health_sensor(
        build_sensor_context(resources=resources(cfg), instance=instance)
    ).run_requests
    assert request_.run_config["ops"]["recover"]["config"] == {"job": job, "restore": True}


@pytest.mark.slow
@pytest.mark.parametrize("where", ["local", "store"])
def test_rescale_is_checked_and_the_job_goes_on(spark, cfg, capsys, where, request, monkeypatch):
    """On a local disk and with the data root on the project's S3 server."""
    from argparse import Namespace

    from orchestration.cli import operate
    from streaming_jobs.operations.rescale import state_partitions

    if where == "store":
        cfg = _on_store(spark, cfg, request, monkeypatch)
    spec = get_job("events_by_type")
    first = [click(f"a{i}", f"u{i % 3}", i / 2) for i in range(12)]
    land(cfg, "a.jsonl", first, stream="clicks")
    run_bronze(spark, cfg, "clicks")
    run_job(spark, cfg, spec)
    parts = cfg.spark.shuffle_partitions  # a new checkpoint's, fixed by its first batch
    assert state_partitions(spark, cfg, spec.name) == {parts}

    def state_rows() -> int:  # the dedup state, as Spark's state reader sees it
        return (
            spark.read.format("statestore")
            .load(spark_path(cfg.paths.checkpoint(spec.name)))
            .count()
        )

    held = state_rows()

    # Spark 4.2.0's offline repartitioning leaves the checkpoint as it was: rescale says so
    # (instead of reporting a success) and the job goes on untouched.
    with pytest.raises(operate.OperationError, match="returned without rewriting the state") as no:
        operate.rescale(cfg, Namespace(job=spec.name, partitions=parts * 2))
    # what to do instead is the product's own command, not deleting files by hand
    assert f"'tidemark rebuild {spec.name} --partitions {parts * 2}'" in str(no.value)
    assert state_partitions(spark, cfg, spec.name) == {parts}
    assert len(savepoints.savepoints(cfg, spec.name)) == 1  # taken before the attempt
    assert state_rows() == held

    second = [click(f"b{i}", f"u{i % 3}", 6 + i / 2) for i in range(6)] + [first[-1]]  # a duplicate
    land(cfg, "b.jsonl", second, stream="clicks")
    run_bronze(spark, cfg, "clicks")
    run_job(spark, cfg, spec)
    ids = sorted(
        r.event_id for r in read_table(spark, cfg.paths.table("gold", spec.name)).collect()
    )
    assert ids == sorted({e["event_id"] for e in first + second})  # the duplicate was still known

    capsys.readouterr()
    assert operate.state(cfg, Namespace(job=spec.name, top=2)) == 0
    out = capsys.readouterr().out
    rows = state_rows()
    assert f"dedupeWithinWatermark (store default): {rows:,} rows, {parts} partitions" in out
    with pytest.raises(operate.OperationError, match=f"already has {parts} partitions"):
        operate.rescale(cfg, Namespace(job=spec.name, partitions=parts))


def test_failed_continuous_runs_are_restarted_at_once_then_with_backoff_then_given_up(
    spark, cfg, instance, monkeypatch
):
    from orchestration.defs.streaming.jobs import continuous_streaming_job as make_job

    continuous_streaming_job = make_job()
    from orchestration.defs.streaming import sensors
    from orchestration.defs.streaming.sensors import (
        ATTEMPT_TAG,
        RESTART_OF_TAG,
        streaming_restart_sensor,
    )

    bad = {"ops": {"run_continuously": {"config": {"jobs": ["no_such_job"]}}}}
    failed = continuous_streaming_job.execute_in_process(
        run_config=bad, resources=resources(cfg), instance=instance, raise_on_error=False
    )
    assert not failed.success

    # The first restart is asked for at the first tick, whatever the backoff ...
    monkeypatch.setenv("TIDEMARK_RESTART_BACKOFF_SECONDS", "3600")
    tick = streaming_restart_sensor(
        build_sensor_context(resources=resources(cfg), instance=instance)
    )
    [request] = tick.run_requests
    assert request.tags == {ATTEMPT_TAG: "1", RESTART_OF_TAG: failed.run_id}
    assert request.run_config == bad
    # ... and the crash is said at once: a warning naming the run, its error and the restart
    [crashed] = alerts.open_alerts(cfg)
    assert (crashed["kind"], crashed["severity"]) == ("continuous_run_failed", "warning")
    assert failed.run_id in crashed["message"] and "no_such_job" in crashed["message"]
    assert "again at once (restart 1 of 3)" in crashed["message"]
    again = streaming_restart_sensor(
        build_sensor_context(resources=resources(cfg), instance=instance, cursor=tick.cursor)
    )
    assert again.run_requests == []  # one restart per failed run

    # The restart fails too: the second waits out the backoff, in the same incident.
    second = continuous_streaming_job.execute_in_process(
        run_config=bad,
        resources=resources(cfg),
        instance=instance,
        raise_on_error=False,
        tags=request.tags,
    )
    assert not second.success
    waiting = streaming_restart_sensor(
        build_sensor_context(resources=resources(cfg), instance=instance, cursor=again.cursor)
    )
    assert waiting.run_requests == []  # inside the backoff: not yet, and not forgotten
    [incident] = alerts.open_alerts(cfg)
    assert incident["alert_id"] == crashed["alert_id"]  # one incident
    assert second.run_id in incident["message"]
    assert "again 3600s after the failure (restart 2 of 3)" in incident["message"]
    monkeypatch.setenv("TIDEMARK_RESTART_BACKOFF_SECONDS", "0")
    tick = streaming_restart_sensor(
        build_sensor_context(resources=resources(cfg), instance=instance, cursor=waiting.cursor)
    )
    [request] = tick.run_requests
    assert request.tags == {ATTEMPT_TAG: "2", RESTART_OF_TAG: failed.run_id}
    again = streaming_restart_sensor(
        build_sensor_context(resources=resources(cfg), instance=instance, cursor=tick.cursor)
    )
    assert again.run_requests == []

    # The restart (launched as the sensor asks, here with a job that works) commits: resolved.
    land(cfg, "r.jsonl", [click(f"r{i}", "u1", i) for i in range(3)], stream="clicks")
    restarted = continuous_streaming_job.execute_in_process(
        run_config={
            "ops": {
                "run_continuously": {
                    "config": {
                        "jobs": ["events_by_type"],
                        "trigger_seconds": 1.0,
                        "flush_seconds": 1.0,
                        "max_seconds": 15.0,
                    }
                }
            }
        },
        resources=resources(cfg),
        instance=instance,
        raise_on_error=False,
        tags=request.tags,
    )
    assert restarted.success
    recovered = streaming_restart_sensor(
        build_sensor_context(resources=resources(cfg), instance=instance, cursor=again.cursor)
    )
    assert recovered.run_requests == [] and alerts.open_alerts(cfg) == []
    [closed] = alerts.load(cfg)
    assert restarted.run_id in closed["resolution"]

    # A restart that recovered and ran a while, then failed (as the sensor fails a run whose
    # process died), is restart 1 of a new chain and a new incident, not the chain's third.
    monkeypatch.setattr(sensors, "NEW_CHAIN_AFTER_SECONDS", 0.0)
    instance.report_run_failed(instance.get_run_by_id(restarted.run_id), message="killed")
    renewed = streaming_restart_sensor(
        build_sensor_context(resources=resources(cfg), instance=instance, cursor=recovered.cursor)
    )
    [request] = renewed.run_requests
    assert request.tags == {ATTEMPT_TAG: "1", RESTART_OF_TAG: restarted.run_id}
    [incident] = alerts.open_alerts(cfg)
    assert incident["dedup_key"] == f"continuous_run_failed:{restarted.run_id}"
    alerts.resolve(cfg, incident["dedup_key"], "the test's restart")
    monkeypatch.setattr(sensors, "NEW_CHAIN_AFTER_SECONDS", 600.0)

    # The last allowed attempt failed too: no restart, one critical alert.
    last = continuous_streaming_job.execute_in_process(
        run_config=bad,
        resources=resources(cfg),
        instance=instance,
        raise_on_error=False,
        tags={ATTEMPT_TAG: "3", "tidemark/restart_of": failed.run_id},
    )
    assert not last.success
    final = streaming_restart_sensor(
        build_sensor_context(resources=resources(cfg), instance=instance, cursor=renewed.cursor)
    )
    assert final.run_requests == []
    [alert] = alerts.open_alerts(cfg)
    assert (alert["kind"], alert["severity"]) == ("restart_exhausted", "critical")
    assert failed.run_id in alert["dedup_key"] and last.run_id in alert["message"]


def test_a_run_its_code_server_saw_killed_is_alerted_with_the_signal(cfg, instance, monkeypatch):
    """Dagster's code server fails a run whose process ended with a run failure that says only
    "marked as failed from outside the execution context"; the alert also says how the process
    ended, in the code server's own words (recorded here as the code server records them), and
    not its guess at memory."""
    from dagster._grpc.server import DagsterApiServer
    from dagster._utils import get_run_crash_explanation

    from orchestration.defs.streaming.jobs import continuous_streaming_job
    from orchestration.defs.streaming.sensors import streaming_restart_sensor

    job = continuous_streaming_job()
    run = instance.create_run_for_job(job_def=job, run_config={})
    said = get_run_crash_explanation(f"Run execution process for {run.run_id}", exit_code=-9)
    instance.report_engine_event(said, run, cls=DagsterApiServer)
    instance.report_run_failed(run)
    monkeypatch.setenv("TIDEMARK_RESTART_BACKOFF_SECONDS", "0")
    tick = streaming_restart_sensor(
        build_sensor_context(resources=resources(cfg), instance=instance)
    )
    [crashed] = alerts.open_alerts(cfg)
    assert crashed["kind"] == "continuous_run_failed"
    assert (
        f"run {run.run_id} failed (This run has been marked as failed from outside the "
        f"execution context; Run execution process for {run.run_id} was terminated by signal "
        "9 (SIGKILL))" in crashed["message"]
    )
    assert "memory" not in crashed["message"]
    [request] = tick.run_requests
    assert request.tags["tidemark/restart_of"] == run.run_id


# A continuous run in a process of its own, recorded in the test's instance, as a run worker
# runs it (the op tags the run with its process, then starts Spark and its queries).
KILLED_WORKER = """
import sys
from dagster import DagsterInstance
from orchestration.defs.streaming.jobs import continuous_streaming_job
from orchestration.lib.resources import TidemarkResource, TidemarkSparkResource
home, root = sys.argv[1:3]
continuous_streaming_job().execute_in_process(
    run_config={"ops": {"run_continuously": {"config": {"jobs": ["events_by_type"],
        "trigger_seconds": 1.0, "max_seconds": 600.0}}}},
    resources={"tidemark": TidemarkResource(data_root=root),
               "pyspark": TidemarkSparkResource(spark_config={}, data_root=root)},
    instance=DagsterInstance.local_temp(home),
)
"""


def test_a_continuous_run_whose_process_is_killed_is_failed_and_restarted(
    cfg, instance, tmp_path, monkeypatch
):
    """A run whose process is killed with no code server left to notice (here: started
    outside one) stays STARTED for ever under Dagster's default run launcher, which has no
    health check; the restart sensor finds its process gone, fails it with that reason, and
    starts it again."""
    import os
    import signal
    import time

    import dagster as dg

    from orchestration.defs.streaming.jobs import WORKER_TAG
    from orchestration.defs.streaming.sensors import ATTEMPT_TAG, streaming_restart_sensor

    land(cfg, "k.jsonl", [click(f"k{i}", "u1", i) for i in range(3)], stream="clicks")
    worker = subprocess.Popen(
        [sys.executable, "-c", KILLED_WORKER, str(tmp_path / "dagster"), str(cfg.data_root)],
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            tagged = [r for r in instance.get_runs() if WORKER_TAG in r.tags]
            if tagged:
                break
            assert worker.poll() is None, "the continuous run ended by itself"
            time.sleep(0.2)
        [run] = tagged
        assert run.tags[WORKER_TAG].split(":")[1] == str(worker.pid)
        monkeypatch.setenv("TIDEMARK_RESTART_BACKOFF_SECONDS", "3600")
        alive = streaming_restart_sensor(
            build_sensor_context(resources=resources(cfg), instance=instance)
        )
        assert alive.run_requests == [] and alerts.open_alerts(cfg) == []
        assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.STARTED
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()
    # Dagster itself never notices: the run is still STARTED
    assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.STARTED

    tick = streaming_restart_sensor(
        build_sensor_context(resources=resources(cfg), instance=instance, cursor=alive.cursor)
    )
    assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.FAILURE
    [crashed] = alerts.open_alerts(cfg)
    assert crashed["kind"] == "continuous_run_failed" and run.run_id in crashed["message"]
    assert f"(pid {worker.pid}) ended without reporting" in crashed["message"]
    [request] = tick.run_requests  # the first restart: at once
    assert request.tags[ATTEMPT_TAG] == "1" and request.run_config == run.run_config


def test_health_finds_a_failed_query_and_a_job_falling_behind(spark, cfg):
    from streaming_jobs.storage.failures import record_failure

    spec = get_job("events_by_type")
    land(cfg, "a.jsonl", [click(f"a{i}", "u1", i) for i in range(3)], stream="clicks")
    run_bronze(spark, cfg, "clicks")
    run_job(spark, cfg, spec)
    assert check_checkpoint(cfg, spec.name, spec.sources, idle_seconds=0) == []
    # Bronze moves on and the job does not follow.
    land(cfg, "b.jsonl", [click("b1", "u1", 5)], stream="clicks")
    run_bronze(spark, cfg, "clicks")
    behind = check_checkpoint(cfg, spec.name, spec.sources, idle_seconds=0)
    assert [f.kind for f in behind] == ["falling_behind"] and "bronze/clicks" in behind[0].message
    assert check_checkpoint(cfg, spec.name, spec.sources, idle_seconds=3600) == []
    # Its next run fails (recorded by the runner the same way).
    record_failure(cfg, spec.name, "run-x", "java.lang.OutOfMemoryError: Java heap space")
    [failed] = check_checkpoint(cfg, spec.name, spec.sources, idle_seconds=3600)
    assert (failed.kind, failed.severity) == ("query_failed", "critical")
    assert "OutOfMemoryError" in failed.message
    # A successful run commits after the failure: the finding is gone.
    run_job(spark, cfg, spec)
    assert check_checkpoint(cfg, spec.name, spec.sources, idle_seconds=0) == []


NO_JVM_PROBE = """
import json, time
import pyspark
from dagster import DagsterInstance, build_sensor_context
from orchestration.lib.resources import TidemarkResource
from orchestration.defs.ops.sensors import checkpoint_health_sensor, state_size_sensor
from streaming_jobs.core.config import TidemarkConfig
cfg = TidemarkConfig.from_env()
resources = {"tidemark": TidemarkResource(data_root=str(cfg.data_root))}
out = {}
for sensor in (checkpoint_health_sensor, state_size_sensor):
    result = sensor(build_sensor_context(instance=DagsterInstance.ephemeral(),
                                         resources=resources))
    out[sensor.name] = len(result.asset_events)
out["jvm"] = pyspark.SparkContext._gateway is not None
print("PROBE " + json.dumps(out))
"""


def test_sensors_evaluate_without_starting_a_jvm(spark, cfg):
    """A sensor tick reads files and ops tables only: in a fresh process, no JVM starts."""
    from helpers import click, land
    from streaming_jobs.storage.registry import get_job
    from streaming_jobs.runtime.runner import run_bronze, run_job

    land(cfg, "a.jsonl", [click(f"a{i}", "u1", i) for i in range(5)], stream="clicks")
    run_bronze(spark, cfg, "clicks")
    run_job(spark, cfg, get_job("events_by_type"))
    result = subprocess.run(
        [sys.executable, "-c", NO_JVM_PROBE], capture_output=True, text=True, timeout=300
    )
    line = next(l for l in result.stdout.splitlines() if l.startswith("PROBE "))
    probe = json.loads(line.removeprefix("PROBE "))
    assert probe["jvm"] is False
    # a check evaluation per job; and the one job with state readings has its observation
    assert probe["checkpoint_health_sensor"] == 6
    assert probe["state_size_sensor"] == 2
