"""One dbt invocation that runs SQL at a time per data root: a second `tidemark-dbt build`
(by hand beside a scheduled reconciliation, or on another machine) says who holds the data
root's reconciliation and waits, and goes on once the holder is gone, even when it was killed
with kill -9. On a local disk and with the data root on the project's S3 server."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import textwrap
import threading
import time

import pytest

HOLDER = textwrap.dedent(
    """
    import time
    from streaming_jobs.core.config import TidemarkConfig
    from orchestration.recon.dbt_cli import reconciliation_lock

    with reconciliation_lock(TidemarkConfig.from_env(), "build"):
        print("held", flush=True)
        time.sleep(600)
    """
)


def _lines(stream) -> queue.Queue:
    got: queue.Queue = queue.Queue()

    def read():
        for line in stream:
            got.put(line)
        got.put(None)

    threading.Thread(target=read, daemon=True).start()
    return got


def _until(lines: queue.Queue, text: str, seconds: float) -> str:
    deadline, seen = time.monotonic() + seconds, []
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            break
        if line is None:
            break
        seen.append(line)
        if text in line:
            return line
    raise AssertionError(f"no line with {text!r} in {seconds} s; got:\n{''.join(seen)}")


@pytest.mark.slow
@pytest.mark.own_sql  # (no endpoint at all: a build past the lock stops at once, saying so)
@pytest.mark.parametrize("where", ["disk", "store"])
def test_a_second_build_waits_for_the_reconciliation_in_flight_and_goes_on_when_it_is_killed(
    where, cfg, tmp_path, request
):
    env = {k: v for k, v in os.environ.items() if k != "TIDEMARK_SQL_ENDPOINT"}
    # no endpoint runs for this data root: once past the lock, the build stops at once, saying so
    env["TIDEMARK_DBT_TARGET"] = "endpoint"
    root = str(cfg.data_root)
    if where == "store":
        _, s3_cfg, _, bucket = request.getfixturevalue("s3_bucket")
        root = f"s3://{bucket}/root"
        env["TIDEMARK_S3_HOME"] = str(s3_cfg.s3.home)
        env["TIDEMARK_S3_PORT"] = str(s3_cfg.s3.port)
    env["TIDEMARK_DATA_ROOT"] = root
    env["TIDEMARK_WORK_DIR"] = str(tmp_path / "work")
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    holder = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        text=True,
        env={**env, "TIDEMARK_DAGSTER_RUN_ID": "a1b2c3d4"},  # (as a scheduled run's build)
    )
    build = None
    try:
        assert holder.stdout.readline().strip() == "held"
        build = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "orchestration.recon.dbt_cli",
                "build",
                "--select",
                "stg_orders",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        said = _lines(build.stderr)
        waits = _until(said, "waits for", 180)
        holding = f"tidemark-dbt build of Dagster run a1b2c3d4 (pid {holder.pid} "
        assert f"tidemark-dbt: build waits for {holding}" in waits
        assert f"which runs dbt on {root}" in waits
        time.sleep(3)
        assert build.poll() is None, "the second build went on while the first held the lock"

        holder.kill()  # kill -9: no release; the OS drops the flock, the lease's holder is gone
        holder.wait(timeout=30)
        _until(said, "no SQL endpoint runs", 120)  # past the lock, at the next step
        assert build.wait(timeout=60) != 0
    finally:
        for process in (holder, build):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait(timeout=30)


@pytest.mark.own_sql  # (no dbt: the lock, the takeover and the record)
def test_a_build_whose_lease_was_taken_over_while_it_ran_is_recorded_as_failed(cfg, s3_bucket):
    """On a store, a build paused past its lease's term while another took the lock is told at
    its end: the lock is lost, naming the new holder, and its outcome is recorded as an error,
    whatever dbt said (another build may have replaced its tables)."""
    import json
    from datetime import datetime, timezone

    import obstore
    from dbt.cli.main import dbtRunnerResult

    from orchestration.recon import recon_runs
    from orchestration.recon.dbt_cli import lock_lost, reconciliation_lock
    from streaming_jobs.storage import ops_tables

    _, s3_cfg, _, bucket = s3_bucket
    store = s3_cfg.with_data_root(f"s3://{bucket}/root")
    started = datetime.now(timezone.utc)
    with reconciliation_lock(store, "build") as fence:
        assert lock_lost(fence) is None
        record, _ = fence.read()
        # the record another process's lease writes when it takes over after this one's term
        taken = {**record, "holder": "tidemark-dbt build of Dagster run e5f6", "pid": 1}
        taken.update(token=record["token"] + 1, host="elsewhere")
        obstore.put(fence.store, fence.key, json.dumps(taken).encode())
        lost = lock_lost(fence)
    assert lost is not None and "tidemark-dbt build of Dagster run e5f6" in lost
    assert fence.read()[0]["holder"] == taken["holder"]  # (not released over the new holder)

    recon_runs.record_outcome(store, dbtRunnerResult(success=True), started, lost)
    [row] = ops_tables.read(store, "recon_runs")
    assert row["run_status"] == "error" and row["status"] == "error"
    assert row["message"].startswith(
        "this build lost the data root's reconciliation lock while it ran: lease "
    )
