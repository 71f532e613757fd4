"""tools/cpu_by_process.py: each process summed into the role it plays, and a live sample."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import cpu_by_process
from cpu_by_process import Sampler, TreeReading, role, summarize

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


SPIN = "import time\nend = time.process_time() + {}\nwhile time.process_time() < end: pass\n"


def _only(reading: TreeReading, *pids: int) -> TreeReading:
    """``reading`` with this process and ``pids`` alone: a SparkSession an earlier test of this
    worker started is in its tree too, and its JVM's CPU meanwhile is not what is measured."""
    keep = {os.getpid(), *pids}
    return TreeReading(
        {key: value for key, value in reading.members.items() if key[0] in keep}, reading.machine
    )


def test_a_tree_counts_the_children_it_ran_and_reaped():
    """A child that spins for half a second of CPU and is reaped between two readings: the
    half second moves into this process's children's times and is counted once."""
    before = _only(cpu_by_process.read_tree())
    subprocess.run([sys.executable, "-c", SPIN.format(0.5)], check=True)
    use = cpu_by_process.tree_use(before, _only(cpu_by_process.read_tree()))
    assert use.lost == () and 0.5 <= use.seconds <= 1.5, use  # and its interpreter's start


def test_a_child_running_at_the_first_reading_counts_only_what_it_used_after():
    """A child spins 0.6 s, is read, spins 0.5 s more and is reaped: its CPU before the first
    reading comes off again (counted twice, the figure would pass 1.1 s)."""
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            SPIN.format(0.6) + "import sys\nsys.stdin.readline()\n" + SPIN.format(0.5),
        ],
        stdin=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while cpu_by_process._read(str(child.pid))[1] < 0.6 and time.monotonic() < deadline:
            time.sleep(0.05)
        before = cpu_by_process.read_tree()
        assert any(pid == child.pid for pid, _ in before.members)
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.wait(timeout=60) == 0
    finally:
        child.kill()
    use = cpu_by_process.tree_use(_only(before, child.pid), _only(cpu_by_process.read_tree()))
    assert use.lost == () and 0.5 <= use.seconds < 1.0, use


def test_a_process_that_leaves_the_tree_running_makes_the_figure_unknown():
    """A child forks a grandchild and ends: the grandchild, reparented, runs on outside the
    tree, and what it used in between cannot be told: no figure, and the process named."""
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, sys, time\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    time.sleep(120)\n"
            "    os._exit(0)\n"
            "print(pid, flush=True)\n"
            "sys.stdin.readline()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    grandchild = int(child.stdout.readline())
    try:
        before = cpu_by_process.read_tree()
        assert {child.pid, grandchild} <= {pid for pid, _ in before.members}
        child.stdin.write("end\n")
        child.stdin.flush()
        assert child.wait(timeout=60) == 0
        use = cpu_by_process.tree_use(before, cpu_by_process.read_tree())
    finally:
        os.kill(grandchild, signal.SIGKILL)
    assert use.seconds is None
    assert len(use.lost) == 1 and f"(pid {grandchild}) left the tree running" in use.lost[0], use


def test_a_child_whose_time_reached_no_parent_makes_the_figure_unknown():
    """Two readings written out: a child that used 0.5 s is gone at the second and its parent
    gained 0.05 s, so the child's time went to nobody (reaped without a wait). The figure
    would be 0.05 - 0.5, below zero: it is unknown, the parent named. Had the parent gained
    0.6 s, its children's 0.5 s was passed on, and what the tree used is 0.1 s."""
    parent, child = (100, 1), (200, 2)

    def reading(parent_cpu: float, with_child: bool):
        members = {parent: (1, "python3", parent_cpu)}
        if with_child:
            members[child] = (100, "sh", 0.5)
        return cpu_by_process.TreeReading(members, {100: 1} | ({200: 2} if with_child else {}))

    use = cpu_by_process.tree_use(reading(1.0, True), reading(1.05, False))
    assert use.seconds is None and len(use.lost) == 1, use
    assert "python3 (pid 100)" in use.lost[0] and "0.50 s" in use.lost[0]
    use = cpu_by_process.tree_use(reading(1.0, True), reading(1.6, False))
    assert use.lost == () and use.seconds == 0.1, use
