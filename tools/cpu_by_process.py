"""Where the machine's CPU goes while a command runs (CI, a test file, a benchmark), by role.

    .venv/bin/python tools/cpu_by_process.py --results results/cpu_ci.json -- make test
    .venv/bin/python tools/cpu_by_process.py --results cpu.json --seconds 1500   # whatever runs

Samples every process of the machine once a second (``/proc``: user and system CPU, command
line, parent) while the command runs, or for ``--seconds``, and sums each process's CPU into
the role it plays: the test session's SparkSessions, the SQL endpoint, the JVMs of commands and
killed workers, dbt, pytest, the Python workers of Spark, the servers. A process that lives
less than a second may be missed: the figures are a lower bound (docs/testing.md, "Where the
CPU goes"). Linux only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first), None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()


def _read(pid: str) -> tuple[int, float, float] | None:
    """(parent pid, CPU seconds so far, start time in ticks) of a process, None if gone."""
    fields = _stat(pid)
    if fields is None:
        return None
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK, float(fields[19])


def _command(pid: int | str) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()[:800]


def _exe(pid: str) -> str:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""


@dataclass(frozen=True)
class TreeReading:
    """One reading of a process and its descendants: each member by (pid, start time in
    ticks) with its parent, its name and its CPU so far (its own and its reaped children's:
    ``/proc``'s utime, stime, cutime, cstime), and every process of the machine then (pid to
    start time), to tell a member that left the tree running from one that ended."""

    members: dict[tuple[int, int], tuple[int, str, float]]
    machine: dict[int, int]


def read_tree(pid: int | None = None) -> TreeReading:
    """The tree of a process (this one unless given) as it is now."""
    children: dict[int, list[int]] = defaultdict(list)
    seen: dict[int, tuple[int, int, str, float]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        cpu = sum(int(f) for f in fields[11:15]) / TICK
        seen[int(entry)] = (int(fields[19]), int(fields[1]), name, cpu)
        children[int(fields[1])].append(int(entry))
    members: dict[tuple[int, int], tuple[int, str, float]] = {}
    todo = [os.getpid() if pid is None else pid]
    while todo:
        current = todo.pop()
        if current in seen:
            start, parent, name, cpu = seen[current]
            members[(current, start)] = (parent, name, cpu)
            todo.extend(children.get(current, []))
    return TreeReading(members, {p: v[0] for p, v in seen.items()})


@dataclass(frozen=True)
class TreeUse:
    """What a tree used between two readings: ``seconds`` is exact when ``lost`` is empty;
    each entry of ``lost`` names a process of the first reading whose CPU in between cannot
    be told (it left the tree running, or ended outside it), and then ``seconds`` is None."""

    seconds: float | None
    lost: tuple[str, ...]


def tree_use(before: TreeReading, after: TreeReading) -> TreeUse:
    """The CPU a tree used between two readings. A process present at both counts its
    difference, a new one all it used; a process of the first reading that ended and was
    reaped by its parent, still in the tree, moved its CPU into that parent's children's
    times: what it had used before the first reading comes off again. Any other process of
    the first reading that is not in the second makes the figure unknown, never a wrong one
    (a child the tree reparented to init and that ended there took its CPU with it), and so
    does a parent whose CPU grew less than its reaped children had used: a child reaped
    without a wait (its parent ignores SIGCHLD) passes its time to nobody."""
    total = sum(cpu for _, _, cpu in after.members.values())
    keys_before = {key[0]: key for key in before.members}
    lost, reaped = [], defaultdict(float)
    for key, (parent, name, cpu) in before.members.items():
        if key in after.members:
            total -= cpu
            continue
        pid, started = key
        parent_key = keys_before.get(parent)
        if after.machine.get(pid) == started:
            lost.append(f"{name} (pid {pid}) left the tree running")
        elif parent_key is not None and parent_key in after.members:
            total -= cpu
            reaped[parent_key] += cpu
        else:
            lost.append(f"{name} (pid {pid}) ended outside the tree")
    for parent_key, used in reaped.items():
        grew = after.members[parent_key][2] - before.members[parent_key][2]
        if grew < used - 2 / TICK:  # two clock ticks of rounding
            lost.append(
                f"{before.members[parent_key][1]} (pid {parent_key[0]}) gained {grew:.2f} s "
                f"where its ended children had used {used:.2f} s: their time went to nobody"
            )
    return TreeUse(None if lost else round(total, 2), tuple(lost))


class Sampler:
    """Every process seen, keyed by (pid, start time): a pid reused is another process."""

    def __init__(self) -> None:
        self.processes: dict[tuple[str, float], dict] = {}
        self.started = time.monotonic()
        self.first = True  # a process running before the first sample counts from it on

    def sample(self) -> None:
        now = round(time.monotonic() - self.started, 1)
        for pid in filter(str.isdigit, os.listdir("/proc")):
            read = _read(pid)
            if read is None:
                continue
            parent, cpu, start = read
            seen = self.processes.get((pid, start))
            exe = _exe(pid)
            # new, or exec'd (spark-class execs java); a process ending has no exe: kept as was
            if seen is None or (exe and seen["exe"] != exe):
                seen = self.processes.setdefault(
                    (pid, start), {"pid": int(pid), "first": now, "before": cpu * self.first}
                )
                seen.update(
                    parent=parent,
                    exe=exe,
                    command=_command(pid),
                    ancestors=self._ancestors(parent),
                )
            seen.update(cpu=cpu - seen["before"], last=now)
        self.first = False

    def _ancestors(self, parent: int) -> list[str]:
        """The commands of up to six ancestors, nearest first (read while they run)."""
        found = []
        while parent > 1 and len(found) < 6:
            found.append(_command(parent)[:300])
            read = _read(str(parent))
            if read is None:
                break
            parent = read[0]
        return found

    def records(self) -> list[dict]:
        return list(self.processes.values())


def role(record: dict) -> str:
    """The role a process plays in a test session or a run of tidemark."""
    exe, command, ancestors = record["exe"], record["command"], record["ancestors"]
    parent = ancestors[0] if ancestors else ""
    if exe.endswith("/weed"):
        return "S3 server (SeaweedFS)"
    if exe.endswith("/java"):
        if "streaming_jobs.services.sql_endpoint" in parent:
            return "JVM: SQL endpoint"
        if "streaming_jobs.services.kafka_broker" in parent or "kafka.Kafka" in command:
            return "JVM: Kafka broker"
        if "deploy.master" in command or "deploy.worker" in command or "Executor" in command:
            return "JVM: Spark cluster"
        if _pytest_worker(parent):
            return "JVM: the test session's SparkSession"
        return f"JVM: {_who(ancestors)}"
    if "python" in os.path.basename(exe):
        if _pytest_worker(command):
            return "Python: pytest"
        if (
            "pyspark.daemon" in command
            or "pyspark.worker" in command
            or "transform_with" in command
        ):
            return "Python: Spark's Python workers (UDFs, keyed state)"
        if "dbt" in command:
            return "Python: dbt"
        return f"Python: {_who([command])}"
    return "other"


def _pytest_worker(command: str) -> bool:
    return "pytest" in command or "sys.stdin.readline()" in command  # xdist's worker


def _who(commands: list[str]) -> str:
    """The nearest tidemark command, tool or module among ``commands``."""
    for command in commands:
        found = re.search(
            r"(tidemark(?:-dbt)? [a-z-]+|tools/[\w/]+\.py(?: [a-z]+)?|-m [\w.]+|dagster[\w-]*)",
            command,
        )
        if found:
            return found.group(1).replace("tools/", "")
        if _pytest_worker(command):
            return "a script a test started"
    return "other"


def summarize(records: list[dict], wall_seconds: float) -> dict:
    by_role: dict[str, dict] = defaultdict(lambda: {"cpu_seconds": 0.0, "processes": 0})
    for record in records:
        entry = by_role[role(record)]
        entry["cpu_seconds"] += record.get("cpu", 0.0)
        entry["processes"] += 1
    total = sum(e["cpu_seconds"] for e in by_role.values())
    rows = sorted(by_role.items(), key=lambda kv: -kv[1]["cpu_seconds"])
    return {
        "wall_seconds": round(wall_seconds, 1),
        "cores": os.cpu_count(),
        "cpu_seconds": round(total, 1),
        "busy_share": round(total / (wall_seconds * (os.cpu_count() or 1)), 3),
        "roles": [
            {
                "role": name,
                "cpu_seconds": round(e["cpu_seconds"], 1),
                "share": round(e["cpu_seconds"] / total, 3) if total else None,
                "processes": e["processes"],
            }
            for name, e in rows
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", required=True, help="where the JSON goes")
    parser.add_argument("--seconds", type=float, help="sample this long (no command given)")
    parser.add_argument("--raw", action="store_true", help="keep every process in the JSON")
    parser.add_argument("command", nargs="*", help="the command to run and sample (after --)")
    args = parser.parse_args(argv)
    if not args.command and not args.seconds:
        parser.error("give a command after -- or --seconds")
    sampler, stop = Sampler(), []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    child = subprocess.Popen(args.command) if args.command else None
    deadline = time.monotonic() + (args.seconds or float("inf"))
    code = 0
    while not stop and time.monotonic() < deadline:
        sampler.sample()
        if child is not None and child.poll() is not None:
            code = child.returncode
            break
        time.sleep(1)
    summary = summarize(sampler.records(), time.monotonic() - sampler.started)
    summary["command"] = args.command or f"every process for {args.seconds} s"
    if args.raw:
        summary["processes"] = sampler.records()
    Path(args.results).write_text(json.dumps(summary, indent=1) + "\n")
    print(
        f"{summary['cpu_seconds']:,.0f} CPU s in {summary['wall_seconds']:,.0f} s on "
        f"{summary['cores']} cores ({summary['busy_share']:.0%} busy)"
    )
    for row in summary["roles"][:15]:
        print(
            f"{row['cpu_seconds']:8,.0f} s {row['share']:6.1%} {row['processes']:5d}  {row['role']}"
        )
    return code


if __name__ == "__main__":
    sys.exit(main())
