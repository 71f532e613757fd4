"""tools/cpu_by_process.py: each process summed into the role it plays, and a live sample."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import cpu_by_process
from cpu_by_process import Sampler, role, summarize

WORKER = "/work/.venv/bin/python3 -u -c import sys;exec(eval(sys.stdin.readline()))"
JAVA, PYTHON = "/usr/lib/jvm/java-17/bin/java", "/work/.venv/bin/python3.11"


def _process(exe: str, command: str, *ancestors: str, cpu: float = 1.0) -> dict:
    return {"exe": exe, "command": command, "ancestors": list(ancestors), "cpu": cpu}


def test_each_process_is_given_the_role_it_plays():
    cases = {
        "JVM: the test session's SparkSession": _process(JAVA, "java -cp x", WORKER),
        "JVM: SQL endpoint": _process(
            JAVA, "java -cp x", "python3 -m streaming_jobs.services.sql_endpoint", WORKER
        ),
        "JVM: Kafka broker": _process(
            JAVA, "java kafka.Kafka", "python3 -m streaming_jobs.services.kafka_broker"
        ),
        "JVM: tidemark rebuild": _process(
            JAVA, "java -cp x", "/v/bin/python3 /v/bin/tidemark rebuild chaos_counts", WORKER
        ),
        "JVM: chaos.py worker": _process(
            JAVA, "java -cp x", "/v/bin/python3 /w/tools/chaos.py worker /tmp/r", WORKER
        ),
        "S3 server (SeaweedFS)": _process("/root/.cache/tidemark/s/weed", "weed server"),
        "Python: pytest": _process(PYTHON, WORKER),
        "Python: dbt": _process(PYTHON, "/v/bin/python3 /v/bin/dbt parse --quiet", WORKER),
        "Python: Spark's Python workers (UDFs, keyed state)": _process(
            PYTHON, "python3 -m pyspark.daemon pyspark.worker"
        ),
        "other": _process("/usr/bin/bash", "bash -c make test"),
    }
    assert {name: role(record) for name, record in cases.items()} == {n: n for n in cases}


def test_roles_are_summed_and_shared_out_of_the_whole():
    records = [
        _process(JAVA, "java", WORKER, cpu=30.0),
        _process(JAVA, "java", WORKER, cpu=10.0),
        _process(PYTHON, WORKER, cpu=10.0),
    ]
    summary = summarize(records, wall_seconds=50.0)
    assert summary["cpu_seconds"] == 50.0
    assert summary["busy_share"] == round(50.0 / (50.0 * os.cpu_count()), 3)
    assert summary["roles"][0] == {
        "role": "JVM: the test session's SparkSession",
        "cpu_seconds": 40.0,
        "share": 0.8,
        "processes": 2,
    }
    assert summary["roles"][1]["processes"] == 1 and summary["roles"][1]["share"] == 0.2


def test_a_busy_child_is_sampled_and_counted_from_its_start():
    """A real process that spins for about a second: its CPU is seen, and a process that ran
    before sampling began counts only what it used since (this test's own process)."""
    busy = "import time\nend = time.process_time() + 1.0\nwhile time.process_time() < end: pass"
    sampler = Sampler()
    before = time.process_time()
    sampler.sample()  # this process's CPU so far (its imports, at least) is not counted
    child = subprocess.Popen([sys.executable, "-c", busy])
    while child.poll() is None:
        sampler.sample()
        time.sleep(0.2)
    mine = [r for r in sampler.records() if r["pid"] == os.getpid()]
    theirs = [r for r in sampler.records() if r["pid"] == child.pid]
    assert before > 0.2  # else the next line could not tell
    assert mine and mine[0]["cpu"] <= time.process_time() - before + 0.05
    # the last sample before it exited saw most of its second of CPU
    assert theirs and 0.3 <= theirs[0]["cpu"] <= 1.5, theirs
    assert cpu_by_process.role(theirs[0]).startswith("Python")


def test_a_process_seen_ending_keeps_what_it_was(monkeypatch):
    """A process caught as it ends has no exe and no command line: its role stays the one it
    had (the last sample of a session catches every JVM so)."""
    sampler = Sampler()
    sampler.sample()
    monkeypatch.setattr(cpu_by_process, "_exe", lambda pid: "")
    monkeypatch.setattr(cpu_by_process, "_command", lambda pid: "")
    sampler.sample()
    [mine] = [r for r in sampler.records() if r["pid"] == os.getpid()]
    assert mine["exe"].endswith(os.path.basename(os.path.realpath(sys.executable)))
    assert role(mine) == "Python: pytest"


def test_a_tree_counts_the_children_it_ran_and_reaped():
    """tree_cpu's difference across a child that spins for half a second of CPU and is reaped
    holds that half second (the child's CPU moves into this process's children's times)."""
    spin = "import time\nend = time.process_time() + 0.5\nwhile time.process_time() < end: pass"
    before = cpu_by_process.tree_cpu()
    subprocess.run([sys.executable, "-c", spin], check=True)
    used = cpu_by_process.tree_cpu() - before
    assert 0.5 <= used <= 1.5, used  # the child's 0.5 s, its interpreter's start, this scan
