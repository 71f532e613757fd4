"""Benchmark: a dbt build on the SQL endpoint, with one of tidemark-dbt's changes to how dbt
talks to the endpoint and without it.

    .venv/bin/python tools/benchmarks/dbt_connections.py --runs 3 [--change polls] [-- DBT_ARGS...]

``--change connections`` (the default): ``tidemark-dbt`` keeps each dbt thread's connection to
the endpoint open from one node to the next (`orchestration.recon.dbt_cli.keep_connections_open`);
dbt itself closes it after every node, and each close ends a session on Spark's Thrift server.
``--change polls``: ``tidemark-dbt`` asks whether a statement is done after 0.05 s, then twice
as long each time (`poll_quickly`); dbt-spark asks every ``poll_interval`` seconds (1 in the
project's profile). This runs the same ``tidemark-dbt build`` (``DBT_ARGS``, default ``build
--select fqn:*``) in a new process each time, alternating without the change (the only
difference) and with it, and reports each build's wall time, the endpoint's CPU time, the
connections opened and the statements run.

The data root is ``TIDEMARK_DATA_ROOT``, with its lake built (``tidemark run``) and its endpoint
running (``tidemark sql start``). Prints each run and a markdown table of the medians for
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

WITH = "import sys; import orchestration.recon.dbt_cli as m; "
WITHOUT = {  # the change switched off: dbt's own way
    "connections": WITH + "m.keep_connections_open = lambda: None; ",
    "polls": WITH + "m.poll_quickly = lambda: None; ",
}
RUN = "sys.exit(m.main(sys.argv[1:]))"


def endpoint_jvm(cfg) -> int:
    """The data root's endpoint's JVM (the child of the process that serves it)."""
    from streaming_jobs.services.sql_endpoint import discover

    endpoint = discover(cfg)
    if endpoint is None or endpoint.pid == 0:
        raise SystemExit(f"no SQL endpoint of {cfg.data_root} runs: start it (tidemark sql start)")
    tasks = Path(f"/proc/{endpoint.pid}/task").glob("*/children")
    for child in (c for task in tasks for c in task.read_text().split()):
        if Path(f"/proc/{child}/comm").read_text().strip() == "java":
            return int(child)
    raise SystemExit(f"the endpoint (pid {endpoint.pid}) has no JVM")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _counts(log: Path) -> tuple[int, int]:
    text = log.read_text() if log.exists() else ""
    # a statement's end is logged once ("Poll status: 2, query complete"), its polls are not
    return text.count("Opening a new connection"), text.count("query complete")


def one_build(change: str, on: bool, dbt_args: list[str], pid: int, log: Path) -> dict[str, float]:
    code = (WITH if on else WITHOUT[change]) + RUN
    opened, statements = _counts(log)
    cpu, started = cpu_seconds(pid), time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", code, *dbt_args],
        env={**os.environ, "TIDEMARK_DBT_TARGET": "endpoint"},
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"the build failed:\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}")
    opened_after, statements_after = _counts(log)
    return {
        "wall": wall,
        "endpoint_cpu": cpu_seconds(pid) - cpu,
        "opened": opened_after - opened,
        "statements": statements_after - statements,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="builds of each kind, alternating")
    parser.add_argument("--change", choices=sorted(WITHOUT), default="connections")
    parser.add_argument("dbt_args", nargs="*", default=["build", "--select", "fqn:*"])
    args = parser.parse_args()
    from streaming_jobs.core.config import TidemarkConfig

    cfg = TidemarkConfig.from_env()
    pid = endpoint_jvm(cfg)
    log = cfg.paths.dbt / "logs" / "dbt.log"
    runs: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    for i in range(args.runs):
        for on in (False, True):
            took = one_build(args.change, on, args.dbt_args, pid, log)
            runs[on].append(took)
            print(
                f"run {i + 1}, {args.change} {'tidemark-dbt' if on else 'as dbt does'}: "
                f"{took['wall']:.1f} s, endpoint CPU {took['endpoint_cpu']:.1f} s, "
                f"{took['opened']} connections opened, {took['statements']} statements",
                flush=True,
            )
    print(f"\n| median | {args.change} as dbt does | tidemark-dbt |\n|---|---:|---:|")
    for key, label, form in (
        ("wall", "build (s)", ".1f"),
        ("endpoint_cpu", "endpoint CPU (s)", ".1f"),
        ("opened", "connections opened", ".0f"),
        ("statements", "statements", ".0f"),
    ):
        without, with_ = (statistics.median(r[key] for r in runs[k]) for k in (False, True))
        print(f"| {label} | {without:{form}} | {with_:{form}} |")


if __name__ == "__main__":
    main()
