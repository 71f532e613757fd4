"""Continuous mode through Dagster: terminate, resume, and one owner per checkpoint."""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from dagster import DagsterInstance, DagsterRunStatus

from streaming_jobs.core.checkpoints import last_committed_batch
from streaming_jobs.storage.registry import get_job
from streaming_jobs.core.locations import is_delta_table
from streaming_jobs.storage.lake import read_table
from streaming_jobs.core.checkpoints import CheckpointBusy, checkpoint_lock
from streaming_jobs.runtime.runner import run_bronze, run_job
from streaming_jobs.storage import ops_tables
from orchestration.defs.streaming.jobs import continuous_streaming_job as continuous_job
from orchestration.lib.resources import TidemarkResource, TidemarkSparkResource
from helpers import click, failures_job, land, txn

continuous_streaming_job = continuous_job()

pytestmark = pytest.mark.slow

JOB = "events_by_type"


def wait_for(what, condition, timeout=180.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def gold_ids(spark, cfg) -> list[str]:
    path = cfg.paths.table("gold", JOB)
    if not is_delta_table(path):
        return []
    return sorted(r[0] for r in read_table(spark, path).select("event_id").collect())


def run_config(**extra):
    return {
        "ops": {
            "run_continuously": {
                "config": {"jobs": [JOB], "trigger_seconds": 1.0, "flush_seconds": 2.0, **extra}
            }
        }
    }


def test_terminated_continuous_run_stops_cleanly_and_the_next_run_resumes(spark, cfg, tmp_path):
    resources = {
        "tidemark": TidemarkResource(data_root=str(cfg.data_root)),
        "pyspark": TidemarkSparkResource(spark_config={}, data_root=str(cfg.data_root)),
    }
    (tmp_path / "dagster").mkdir()
    instance = DagsterInstance.local_temp(str(tmp_path / "dagster"))
    first = [click(f"c{i:02d}", f"u{i % 3}", i) for i in range(30)]
    # one duplicate, and one line that is not JSON
    land(cfg, "a.jsonl", first + [first[5], "not json"], stream="clicks")
    results = {}

    def host():
        results["first"] = continuous_streaming_job.execute_in_process(
            run_config=run_config(), instance=instance, resources=resources, raise_on_error=False
        )

    thread = threading.Thread(target=host)
    thread.start()
    wait_for(
        "the continuous run to start",
        lambda: instance.get_runs() and instance.get_runs()[0].status == DagsterRunStatus.STARTED,
    )
    run = instance.get_runs()[0]
    wait_for("wave 1 in gold", lambda: len(gold_ids(spark, cfg)) == 30)

    # Data landing while it runs is picked up by the next trigger; a .gz cut short landed
    # beside it (which failed every try of its batch, and so the run) is refused, by the
    # run's screen or by the batch that listed it first.
    folder = cfg.paths.landing_dir("clicks")
    (folder / ".cut.jsonl.gz").write_bytes(gzip.compress(b"x\n" * 5000)[:-30])
    (folder / ".cut.jsonl.gz").rename(folder / "cut.jsonl.gz")
    second = [click(f"c{i:02d}", f"u{i % 3}", i) for i in range(30, 40)]
    land(cfg, "b.jsonl", second, stream="clicks")
    wait_for("wave 2 in gold", lambda: len(gold_ids(spark, cfg)) == 40)
    assert (folder / "_refused" / "cut.jsonl.gz").is_file()

    # A second run on the same checkpoint is refused, naming the owner: incremental...
    with pytest.raises(CheckpointBusy, match=f"owned by Dagster run {run.run_id}"):
        run_job(spark, cfg, get_job(JOB))
    # ... and continuous, through Dagster.
    refused = continuous_streaming_job.execute_in_process(
        run_config=run_config(), instance=instance, resources=resources, raise_on_error=False
    )
    assert not refused.success
    failure = refused.get_step_failure_events()[0].event_specific_data.error
    assert failure.cause.cls_name == "CheckpointBusy" and run.run_id in failure.cause.message

    # Terminate from Dagster (what the UI's Terminate does first): the run stops cleanly.
    instance.report_run_canceling(run)
    thread.join(timeout=180)
    assert not thread.is_alive(), "the continuous run did not stop"
    result = results["first"]
    # It ends CANCELED: the step reports the interrupt, after its clean stop and its report.
    assert [f.event_specific_data.error_source.value for f in result.get_step_failure_events()] == [
        "INTERRUPT"
    ]
    assert instance.get_run_by_id(run.run_id).status == DagsterRunStatus.CANCELED
    checkpoint = cfg.paths.checkpoint(JOB)
    offsets = sorted(int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())
    assert offsets[-1] == last_committed_batch(checkpoint), "a batch was left uncommitted"
    materialized = {
        m.asset_key.to_user_string(): m.metadata
        for m in (
            ev.event_specific_data.materialization
            for ev in result.get_asset_materialization_events()
        )
    }
    assert set(materialized) == {f"gold/{JOB}", "bronze/clicks"}
    materialized[JOB] = materialized[f"gold/{JOB}"]
    assert materialized[JOB]["input_rows"].value == 41  # 40 events and the duplicate
    # what the run committed, counted: not the sinks' missing row counts read as 0
    assert materialized[JOB]["output_rows"].value == len(gold_ids(spark, cfg)) == 40
    bronze = materialized["bronze/clicks"]
    assert (bronze["output_rows"].value, bronze["quarantined_rows"].value) == (41, 1)
    # each flush's report counts what the run committed so far: never more, never back
    flushed = [
        m.metadata["output_rows"].value
        for m in (
            ev.event_specific_data.materialization
            for ev in result.get_asset_materialization_events()
        )
        if m.asset_key.to_user_string() == f"gold/{JOB}"
    ]
    assert flushed == sorted(flushed) and flushed[-1] == 40 and len(flushed) >= 2
    assert materialized[JOB]["checkpoint_batch_id"].value == last_committed_batch(checkpoint)
    # The locks are free again.
    with checkpoint_lock(checkpoint, "test"):
        pass

    # The next (incremental) run resumes after the last committed batch: nothing twice.
    committed = last_committed_batch(checkpoint)
    third = [click(f"c{i:02d}", f"u{i % 3}", i) for i in range(40, 50)]
    land(cfg, "c.jsonl", third + [third[2]], stream="clicks")
    run_bronze(spark, cfg, "clicks")
    metrics = run_job(spark, cfg, get_job(JOB))
    assert metrics.input_rows == 11  # only the new wave is read
    assert last_committed_batch(checkpoint) > committed
    expected = sorted({e["event_id"] for e in first + second + third})
    assert gold_ids(spark, cfg) == expected


def test_ctrl_c_at_the_command_line_stops_at_a_batch_boundary_with_every_report(
    spark, cfg, tmp_path
):
    """`tidemark continuous` in a terminal: Ctrl-C (SIGINT) is taken as the clean stop, not
    PySpark's handler (which cancels the batch in flight mid-call and can lose its report)."""
    first = [click(f"c{i:02d}", f"u{i % 3}", i) for i in range(30)]
    land(cfg, "a.jsonl", first, stream="clicks")
    command = [
        str(Path(sys.executable).with_name("tidemark")),
        "continuous",
        "--jobs",
        JOB,
        "--trigger",
        "1",
    ]
    # Its output goes to files: a pipe nobody reads until the end fills up (64 kB) and blocks
    # the run at its next log line.
    out_file, err_file = tmp_path / "continuous.out", tmp_path / "continuous.err"
    with out_file.open("w") as out_sink, err_file.open("w") as err_sink:
        proc = subprocess.Popen(
            command,
            stdout=out_sink,
            stderr=err_sink,
            text=True,
            env={**os.environ, "TIDEMARK_DATA_ROOT": str(cfg.data_root)},
        )

    def running() -> bool:
        assert proc.poll() is None, (
            "tidemark continuous ended early",
            proc.returncode,
            err_file.read_text()[-3000:],
        )
        return True

    try:
        wait_for(
            "wave 1 in gold", lambda: running() and len(gold_ids(spark, cfg)) == 30, timeout=300
        )
        second = [click(f"c{i:02d}", f"u{i % 3}", i) for i in range(30, 40)]
        land(cfg, "b.jsonl", second, stream="clicks")
        # The signal lands while wave 2 goes through bronze and the job (the batch in flight).
        wait_for(
            "wave 2 in bronze",
            lambda: running()
            and read_table(spark, cfg.paths.table("bronze", "clicks")).count() == 40,
            timeout=180,
        )
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=180)
    except (AssertionError, subprocess.TimeoutExpired) as failure:
        raise AssertionError(
            f"{failure}\n--- tidemark continuous, stderr ---\n{err_file.read_text()[-3000:]}"
        ) from failure
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out, err = out_file.read_text(), err_file.read_text()
    assert proc.returncode == 0, (out[-2000:], err[-3000:])
    assert "continuous: stopped (SIGINT received)" in out, out[-2000:]
    assert "KeyboardInterrupt" not in err and "reentrant" not in err, err[-3000:]
    # Every batch that read rows was committed with its report. The stop comes at a batch
    # boundary: wave 2 was read by the batch in flight (40 rows reported), or the job's next
    # trigger had not begun and the next run reads it (30 reported; CI hit this order). A batch
    # that read wave 2 and lost its report would show 30 here and leave nothing for the next
    # run. (A watermark-only batch that follows a data batch may be begun when the stop comes;
    # it writes no rows and is run again, or its report is the only thing lost.)
    reports = ops_tables.read(
        cfg,
        "stream_progress",
        where=f"job = {ops_tables.literal(JOB)}",
        columns=["batch_id", "num_input_rows"],
    )
    reported = sum(r["num_input_rows"] for r in reports)
    assert reported in (30, 40), reports
    assert (
        max(r["batch_id"] for r in reports) >= last_committed_batch(cfg.paths.checkpoint(JOB)) - 1
    )
    # The next run reads exactly what no report holds: nothing lost or doubled.
    run_bronze(spark, cfg, "clicks")
    assert reported + run_job(spark, cfg, get_job(JOB)).input_rows == 40, reports
    assert gold_ids(spark, cfg) == sorted(e["event_id"] for e in first + second)


# fails once, the way Spark does when a new Python worker is slow to connect back
FLAKY = failures_job(
    "flaky_failures",
    """
    try:
        os.remove(FLAG)
    except FileNotFoundError:
        return merchant
    raise RuntimeError("Python worker failed to connect back (injected by the test)")
    """,
)


def test_a_transient_failure_restarts_only_that_query_and_loses_nothing(
    spark, cfg, tmp_path, monkeypatch
):
    from streaming_jobs.storage import ops_tables
    from streaming_jobs.operations.continuous import run_continuous

    folder = tmp_path / "jobs"
    folder.mkdir()
    (folder / "flaky_failures.py").write_text(FLAKY)
    flag = tmp_path / "fail-once"
    flag.write_text("")
    monkeypatch.setenv("TIDEMARK_JOBS_PATH", str(folder))
    monkeypatch.setenv("TIDEMARK_TEST_FLAG", str(flag))
    events = [
        txn(f"t{i:02d}", f"u{i % 3}", i, status="FAILED" if i % 3 else "APPROVED")
        for i in range(32)
    ]
    land(cfg, "t.jsonl", events)
    run_bronze(spark, cfg, "transactions")
    # closed by the watermark (last event at minute 31, less 5): [0, 10) and [10, 20)
    expected = {}
    for i in range(32):
        if i % 3 and (i // 10 + 1) * 10 <= 31 - 5:
            expected[i // 10 * 10] = expected.get(i // 10 * 10, 0) + 1
    gold = cfg.paths.table("gold", "flaky_failures")

    def windows():
        if not is_delta_table(gold):
            return {}
        return {r.window_start.minute: r.failures for r in read_table(spark, gold).collect()}

    def done() -> bool:
        try:  # polled while the query commits: a read that races a commit is asked again
            return windows() == expected
        except Exception:  # noqa: BLE001
            return False

    result = run_continuous(
        spark,
        cfg,
        streams=["clicks"],
        jobs=["flaky_failures"],
        trigger_seconds=1.0,
        flush_seconds=1.0,
        max_seconds=300,
        should_stop=done,
    )
    assert not flag.exists()  # the UDF did fail once
    assert result.stopped_by == "stop requested"
    assert [name for name, _ in result.restarted] == ["flaky_failures"]
    assert "failed to connect back" in result.restarted[0][1]
    assert windows() == expected  # exactly once: the failed batch was replayed, not doubled
    recorded = ops_tables.read(cfg, "stream_failures", where="job = 'flaky_failures'")
    assert len(recorded) == 1 and recorded[0]["error"].startswith("restarted in place")
    # the failure is history, not a finding: the query committed after it
    from streaming_jobs.operations.health import check

    assert "query_failed" not in {f.kind for f in check(cfg, "flaky_failures")}


def test_a_torn_newest_commit_is_set_aside_at_a_runs_start_and_every_query_runs_on(spark, cfg):
    """A continuous run restarted after its host lost power while committing: the newest
    commits file of an ingestion and of a job it hosts are torn. The run sets both aside at
    its start, when a recovery run would (`repairs.mend_at_start`), says so, and runs on:
    each batch runs again from its positions (and state), and every landed click is in bronze
    and in gold once. A torn file older than the newest is left as it is."""
    from streaming_jobs.core import locations
    from streaming_jobs.core.locations import Location
    from streaming_jobs.operations.continuous import run_continuous
    from streaming_jobs.storage.repairs import mend_at_start

    landed = []
    for wave in "ab":
        clicks = [click(f"{wave}{i}", f"u{i % 2}", len(landed) + i) for i in range(4)]
        land(cfg, f"{wave}.jsonl", clicks, stream="clicks")
        landed += clicks
        run_bronze(spark, cfg, "clicks")
        run_job(spark, cfg, get_job(JOB))
    torn = {}
    for query in ("bronze_clicks", JOB):
        checkpoint = Location.of(cfg.paths.checkpoint(query))
        newest = last_committed_batch(checkpoint)
        locations.write_bytes(checkpoint / "commits" / str(newest), b'v1\n{"nextBatchWa')
        torn[query] = newest
    more = [click(f"c{i}", "u3", len(landed) + i) for i in range(3)]
    land(cfg, "c.jsonl", more, stream="clicks")
    landed += more
    expected = sorted(c["event_id"] for c in landed)
    result = run_continuous(
        spark,
        cfg,
        streams=["clicks"],
        jobs=[JOB],
        trigger_seconds=1.0,
        flush_seconds=1.0,
        max_seconds=180,
        should_stop=lambda: gold_ids(spark, cfg) == expected,
    )
    assert result.stopped_by == "stop requested"
    assert sorted(s.split(":")[0] for s in result.repaired) == ["bronze_clicks", JOB]
    for query, batch in torn.items():
        [said] = [s for s in result.repaired if s.startswith(f"{query}:")]
        assert f"commits/{batch} was unreadable and is set aside" in said
    bronze = read_table(spark, cfg.paths.table("bronze", "clicks")).select("event_id").collect()
    assert sorted(r.event_id for r in bronze) == expected
    assert gold_ids(spark, cfg) == expected
    kept = locations.names(Location.of(cfg.paths.checkpoints) / ".replaced")
    assert sorted(n.rsplit("-repair-", 1)[0] for n in kept) == ["bronze_clicks", JOB]

    # an older file torn: left for the alert and its backup, the checkpoint untouched
    checkpoint = Location.of(cfg.paths.checkpoint(JOB))
    locations.write_bytes(checkpoint / "commits" / "0", b"v1\n{")
    assert mend_at_start(cfg, JOB) is None
    assert locations.read_bytes(checkpoint / "commits" / "0") == b"v1\n{"
    assert len(locations.names(Location.of(cfg.paths.checkpoints) / ".replaced")) == 2


def test_a_query_that_cannot_start_ends_the_run_and_stops_the_ones_started_beside_it(
    spark, cfg, monkeypatch
):
    """A run's queries start side by side (`_Host.start_all`), on a fresh data root a job after
    the stream whose start creates its bronze table: when one cannot start, the run ends with
    its error only once every other start has finished, and the ones that started are stopped
    with their checkpoints free for the next run."""
    from streaming_jobs.operations import continuous

    land(cfg, "c.jsonl", [click(f"c{i}", "u1", i) for i in range(4)], stream="clicks")
    real = continuous.gold_writer

    def writer(spark_, cfg_, spec, *args, **kwargs):
        if spec.name == "user_sessions":
            raise RuntimeError("user_sessions: its writer failed (injected)")
        time.sleep(3)  # still starting when the other has failed
        return real(spark_, cfg_, spec, *args, **kwargs)

    monkeypatch.setattr(continuous, "gold_writer", writer)
    with pytest.raises(RuntimeError, match="its writer failed"):
        continuous.run_continuous(
            spark, cfg, streams=["clicks"], jobs=[JOB, "user_sessions"], max_seconds=60
        )
    assert spark.streams.active == []
    assert (Path(cfg.paths.checkpoint(JOB)) / "metadata").exists()  # it had started
    monkeypatch.setattr(continuous, "gold_writer", real)
    names = ["bronze_clicks", JOB, "user_sessions"]
    for name in names:  # no lock is left behind
        with checkpoint_lock(cfg.paths.checkpoint(name), "the test"):
            pass
    # each query starts with the run's interpreted plans; the session has its own back after
    key, started_with, start = "spark.sql.codegen.wholeStage", [], continuous._Host.start

    def start_seen(host, name):
        started_with.append((name, host.spark.conf.get(key)))
        return start(host, name)

    monkeypatch.setattr(continuous._Host, "start", start_seen)
    run = continuous.run_continuous(
        spark,
        cfg,
        streams=["clicks"],
        jobs=[JOB, "user_sessions"],
        trigger_seconds=1.0,
        max_seconds=1.0,
    )
    assert sorted(run.metrics) == sorted(names)
    assert sorted(started_with) == [(name, "false") for name in sorted(names)]
    assert spark.conf.get(key) == "true"


def test_a_continuous_runs_queries_plan_without_generated_code_and_the_session_keeps_its_own(
    spark, cfg
):
    """The queries a continuous run starts take `CONTINUOUS_SQL_CONF` (each batch's session,
    which a query copies from the session at its start, says so); the session's own settings are
    back afterwards, and a key TIDEMARK_SPARK_CONF names keeps the user's value."""
    from dataclasses import replace

    from streaming_jobs.operations.continuous import CONTINUOUS_SQL_CONF, interpreted_plans

    key = "spark.sql.codegen.wholeStage"

    def as_a_started_query_sees_it() -> str:
        seen = []
        query = (
            spark.readStream.format("rate")
            .option("rowsPerSecond", 10)
            .load()
            .writeStream.foreachBatch(
                lambda batch, _: seen.append(batch.sparkSession.conf.get(key))
            )
            .start()
        )
        try:
            query.processAllAvailable()
        finally:
            query.stop()
        assert seen and len(set(seen)) == 1, seen
        return seen[0]

    before = {k: spark.conf.get(k, None) for k in CONTINUOUS_SQL_CONF}
    assert spark.conf.get(key) == "true"  # Spark's default, which the tests keep
    with interpreted_plans(spark, cfg):
        inside = as_a_started_query_sees_it()
    assert inside == "false"
    assert as_a_started_query_sees_it() == "true"
    assert {k: spark.conf.get(k, None) for k in CONTINUOUS_SQL_CONF} == before

    mine = replace(cfg, spark=replace(cfg.spark, extra_conf={**cfg.spark.extra_conf, key: "true"}))
    with interpreted_plans(spark, mine):
        assert as_a_started_query_sees_it() == "true"
    assert {k: spark.conf.get(k, None) for k in CONTINUOUS_SQL_CONF} == before
