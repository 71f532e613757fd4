"""tidemark dev as a user starts it, and as a supervisor stops it (SIGTERM)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streaming_jobs.services.processes import free_port
from streaming_jobs.services.sql_endpoint import discover


def descendants(pid: int) -> set[int]:
    """Every process below ``pid``, from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
@pytest.mark.long  # a dev server start: make test-long
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
