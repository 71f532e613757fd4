"""Benchmark: what a scheduled reconciliation costs when nothing new arrived since the last one.

    .venv/bin/python tools/benchmarks/reconciliation.py --events 20000 --days 2 --setup-only
    .venv/bin/python tools/benchmarks/idle_recon.py --data-root <the root it kept> --runs 2

On a data root that ``reconciliation.py --setup-only`` built (every job has streamed), as an
hourly schedule meets a quiet hour:

1. ``tidemark-dbt --full build``: a full reconciliation, which records where each job got to
   (and, with the code that has it, each job's last stream batch);
2. ``--runs`` times ``tidemark-dbt build`` with nothing new: no file landed, no stream ran.

Each is a new ``tidemark-dbt`` process on the session target (a JVM start included), without
dbt's unit tests, as a scheduled run. The code timed is the one ``tidemark-dbt`` imports: set
``PYTHONPATH`` to another checkout to time that one (the full run comes first each time, since
the project's fingerprint differs between checkouts). Prints each run's wall time, its dbt
node count and every job's scope, and a markdown row for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

BUILD = ("build", "--exclude-resource-type", "unit_test")


def timed_build(data_root: Path, *extra: str) -> tuple[float, int, dict[str, str]]:
    """Wall seconds, dbt nodes run, and each job's scope line of one tidemark-dbt build."""
    started = time.monotonic()
    done = subprocess.run(
        [
            str(Path(sys.executable).with_name("tidemark-dbt")),
            "--data-root",
            str(data_root),
            *extra,
            *BUILD,
        ],
        capture_output=True,
        text=True,
    )
    took = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(
            f"tidemark-dbt {' '.join([*extra, *BUILD])} failed on {data_root}:\n"
            f"{done.stdout[-4000:]}"
        )
    results = json.loads((data_root / "dbt" / "target" / "run_results.json").read_text())
    scopes = {}
    for line in done.stderr.splitlines():
        if line.startswith("tidemark-dbt: "):
            job, _, why = line[len("tidemark-dbt: ") :].partition(": ")
            scopes[job] = why
    return took, len(results["results"]), scopes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=2, help="idle runs after the full one")
    args = parser.parse_args()
    root = args.data_root.resolve()
    if not (root / "lake").is_dir():
        raise SystemExit(
            f"{root} has no lake: build one with tools/benchmarks/reconciliation.py "
            "--setup-only and pass the root it kept"
        )
    code = os.environ.get("PYTHONPATH") or "this checkout"
    full, full_nodes, _ = timed_build(root, "--full")
    print(f"full: {full:.1f} s, {full_nodes} nodes  (code: {code})", flush=True)
    idle = []
    for run in range(args.runs):
        took, nodes, scopes = timed_build(root)
        idle.append(took)
        print(f"idle run {run + 1}: {took:.1f} s, {nodes} nodes", flush=True)
        for job, why in sorted(scopes.items()):
            print(f"    {job}: {why}")
    print(
        f"| {code} | {full:.1f} | {' / '.join(f'{t:.1f}' for t in idle)} | "
        f"{100 * min(idle) / full:.0f} % |"
    )


if __name__ == "__main__":
    main()
