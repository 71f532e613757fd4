"""tidemark dev as a user starts it, and as a supervisor stops it (SIGTERM)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streaming_jobs.core.config import CHECKOUT
from streaming_jobs.services.processes import descendants, free_port
from streaming_jobs.services.sql_endpoint import discover


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
@pytest.mark.long  # a dev server start: make test-long
@pytest.mark.own_sql
def test_sigterm_stops_tidemark_dev_and_everything_it_started(cfg):
    """SIGTERM to `tidemark dev` left `dagster dev` running."""
    env = {
        **os.environ,
        "TIDEMARK_DATA_ROOT": str(cfg.data_root),
        "TIDEMARK_SQL_PORT": str(free_port()),
    }
    tidemark = str(Path(sys.executable).with_name("tidemark"))
    proc = subprocess.Popen(
        [tidemark, "dev", "--port", str(free_port())],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    said = []
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            said.append(proc.stdout.readline())
            if said[-1].startswith("Dagster UI:") or proc.poll() is not None:
                break
        assert said[-1].startswith("Dagster UI:"), "".join(said)
        started = descendants(proc.pid)
        assert len(started) >= 3 and discover(cfg) is not None  # dagster dev and its children

        proc.send_signal(signal.SIGTERM)  # to tidemark dev alone, as a supervisor sends it
        said += proc.communicate(timeout=180)[0].splitlines()
        assert proc.returncode == 0, said
        assert "stopping..." in said
        deadline = time.monotonic() + 30
        while any(alive(p) for p in started) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = [p for p in started if alive(p)]
        assert not left, [Path(f"/proc/{p}/cmdline").read_text() for p in left]
        assert discover(cfg) is None  # the SQL endpoint stopped too
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.slow
@pytest.mark.own_sql
def test_a_data_roots_own_endpoint_serves_dbt_until_stopped_and_a_shared_one_is_left_running(
    cfg, tmp_path
):
    """`tidemark sql start` as a user runs it: the endpoint makes the lake's missing tables,
    dbt (target auto) runs there, and its tables land under the data root. Another data root
    that shares it (TIDEMARK_SQL_ENDPOINT) finds it and cannot stop it. (Every other test's dbt
    runs on the session's shared endpoint, in schemas of its own: conftest's shared_sql.)"""
    from streaming_jobs.runtime.tables import missing

    tidemark = str(Path(sys.executable).with_name("tidemark"))
    port = free_port()
    own = {**os.environ, "TIDEMARK_DATA_ROOT": str(cfg.data_root), "TIDEMARK_SQL_PORT": str(port)}
    shared = {
        **os.environ,
        "TIDEMARK_DATA_ROOT": str(tmp_path / "other"),
        "TIDEMARK_SQL_ENDPOINT": f"127.0.0.1:{port}",
        "TIDEMARK_DBT_SCHEMA_PREFIX": "other_",
    }

    def run(env, *args):
        return subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)

    started = run(own, tidemark, "sql", "start")
    try:
        assert started.returncode == 0, started.stderr
        assert f"SQL endpoint on 127.0.0.1:{port} (pid " in started.stdout
        deadline = time.monotonic() + 60
        while missing(cfg) and time.monotonic() < deadline:
            time.sleep(1)
        assert missing(cfg) == []  # made by the endpoint, for the streams that never ran

        dbt = str(Path(sys.executable).with_name("tidemark-dbt"))
        built = run(own, dbt, "run", "--select", "stg_stream_progress")
        assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
        assert "target='endpoint'" in built.stdout
        assert "created sql table model staging.stg_stream_progress" in built.stdout
        assert (cfg.paths.warehouse / "staging.db").is_dir()  # the schema under the data root
        outside = "this is plain dbt, not tidemark-dbt: it takes no reconciliation lock"
        assert outside not in built.stdout + built.stderr
        # plain dbt in dbt_project/ (docs: 'dbt by hand') runs there too, and says what it
        # does not do
        plain = subprocess.run(
            [str(Path(sys.executable).with_name("dbt")), "run", "--profiles-dir", "."]
            + ["--target", "endpoint", "--select", "stg_stream_progress"],
            env={
                **{k: v for k, v in own.items() if k != "TIDEMARK_DBT_RUN_VARS"},  # (a test's)
                "DBT_TARGET_PATH": str(tmp_path / "t"),
                "DBT_LOG_PATH": str(tmp_path / "t"),
            },
            cwd=CHECKOUT / "dbt_project",
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert plain.returncode == 0, plain.stdout[-3000:] + plain.stderr[-3000:]
        assert "created sql table model staging.stg_stream_progress" in plain.stdout
        assert outside in plain.stdout, plain.stdout[-3000:]

        status = run(shared, tidemark, "sql", "status")
        assert status.returncode == 0 and f"127.0.0.1:{port} (shared" in status.stdout
        kept = run(shared, tidemark, "sql", "stop")
        assert kept.returncode == 0 and "is not tidemark's: left running" in kept.stdout
        assert run(own, tidemark, "sql", "status").returncode == 0
    finally:
        stopped = run(own, tidemark, "sql", "stop")
    assert "SQL endpoint stopped" in stopped.stdout
    assert discover(cfg) is None
    assert run(shared, tidemark, "sql", "status").returncode == 1  # nothing answers now


def test_the_code_server_of_tidemarks_dagster_dev_outlasts_a_paused_host(cfg):
    """`dagster dev`'s code server shuts itself down after 45 s without a heartbeat, and then
    refuses every new run while one it hosts goes on: a host paused that long (seen in `make
    live` frozen for 150 s) would leave no reconciliation, savepoint or restart able to start.
    The code server tidemark's `dagster dev` starts, as the operating system sees it: it waits a
    day for a heartbeat, and so does the definitions server it spawns."""
    from orchestration.cli.dagster_dev import PAUSE_TOLERANCE_SECONDS
    from orchestration.cli.live import DagsterDev

    dev = DagsterDev(cfg, free_port())
    cfg.paths.dagster_home.mkdir(parents=True)
    proc = subprocess.Popen(
        dev.command(),
        cwd=CHECKOUT,
        env=dev.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline, server = time.monotonic() + 120, None
        while server is None and time.monotonic() < deadline:
            assert proc.poll() is None, "dagster dev ended"
            for pid in descendants(proc.pid):
                try:
                    argv = Path(f"/proc/{pid}/cmdline").read_text().split("\0")
                    environ = Path(f"/proc/{pid}/environ").read_text().split("\0")
                except OSError:
                    continue
                if "code-server" in argv and "start" in argv:
                    server = argv, environ
            time.sleep(0.5)
        assert server is not None, "no code server started"
        argv, environ = server
        assert "--heartbeat" in argv
        assert argv[argv.index("--heartbeat-timeout") + 1] == str(PAUSE_TOLERANCE_SECONDS)
        assert f"DAGSTER_GRPC_PROXY_HEARTBEAT_TTL_SECONDS={PAUSE_TOLERANCE_SECONDS}" in environ
        assert PAUSE_TOLERANCE_SECONDS >= 3600
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
