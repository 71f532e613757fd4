"""Benchmark: what one incremental run of a job costs, most of it around its single batch.

    .venv/bin/python tools/benchmarks/query_start.py --runs 6          # the keyed-state jobs
    .venv/bin/python tools/benchmarks/query_start.py --jobs events_by_type --runs 4

Every ``tidemark run``, Dagster streaming run and restart starts each job's query anew. A
keyed-state job (``transformWithStateInPandas``) then has Spark's driver run its processor's
``init`` in a new Python process, which imports the job's module, before the first batch is
planned. For each job, on a data root of its own, in one process (one SparkSession,
``local[2]``): a warm-up run, then ``--runs`` times: land a wave of ``--events`` clean events
per source stream, ingest it (not timed), and time ``run_job`` (what those runs do per job):
its wall time, and its first batch's phases from Spark's progress (``queryPlanning``, ``addBatch``,
``triggerExecution``). Prints medians as a markdown table and writes every run to
``--results`` (JSON). Compare two versions of the code by running each in its own checkout,
alternated, in one sitting.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from batch_cost import waves_of

from streaming_jobs.core import locations
from streaming_jobs.core.config import TidemarkConfig, default_results
from streaming_jobs.runtime.runner import run_bronze, run_job
from streaming_jobs.runtime.tables import ensure_lake
from streaming_jobs.storage import ops_tables
from streaming_jobs.storage.generator import GeneratorConfig, write_files
from streaming_jobs.storage.registry import get_job
from streaming_jobs.storage.spark import get_spark

PHASES = ("queryPlanning", "addBatch", "triggerExecution")
KEYED = ["failed_txn_velocity", "user_activity_profile"]


def measure(spark, base: TidemarkConfig, job: str, args) -> list[dict]:
    spec = get_job(job)
    root = Path(tempfile.mkdtemp(prefix=f"query-start-{job}-", dir=args.work))
    cfg = base.with_data_root(root)
    ensure_lake(spark, cfg)
    files = {s: waves_of(s, args.runs + 1, args.events, args.seed) for s in spec.sources}
    runs, last = [], None
    for run in range(args.runs + 1):  # run 0 warms up: the first plans, the tables made
        for stream, waves in files.items():
            write_files(
                cfg.paths.landing_dir(stream),
                GeneratorConfig(stream=stream, seed=args.seed, file_prefix=f"wave{run:03d}"),
                waves,
                only=range(run, run + 1),
            )
            run_bronze(spark, cfg, stream)
        started = time.monotonic()
        metrics = run_job(spark, cfg, spec)
        seconds = time.monotonic() - started
        if run:  # the batches it committed: after the last run's, up to its own last
            first = 0 if last is None else last + 1
            runs.append(
                {
                    "job": job,
                    "run": run,
                    "seconds": seconds,
                    "batches": [first, metrics.checkpoint_batch_id],
                }
            )
        last = metrics.checkpoint_batch_id
    progress = [r for r in ops_tables.read(cfg, "stream_progress") if r["job"] == job]
    by_batch = {r["batch_id"]: dict(r["durations_ms"] or {}) for r in progress}
    for found in runs:  # the run's first batch: the one its query's start is part of
        durations = by_batch.get(found["batches"][0], {})
        found.update({p: durations.get(p) for p in PHASES})
    if not args.keep:
        locations.delete_tree(root)
    return runs


def table(runs: list[dict]) -> list[str]:
    out = [
        "| job | runs | run s (median) | run s (worst) | "
        + " | ".join(f"{p} s" for p in PHASES)
        + " |",
        "|---|---:|---:|---:|" + "---:|" * len(PHASES),
    ]
    for job in dict.fromkeys(r["job"] for r in runs):
        mine = [r for r in runs if r["job"] == job]

        def med(key: str) -> str:
            values = [r[key] for r in mine if r[key] is not None]
            return f"{statistics.median(values) / 1000:.2f}" if values else "missing"

        seconds = [r["seconds"] for r in mine]
        out.append(
            f"| {job} | {len(mine)} | {statistics.median(seconds):.2f} | {max(seconds):.2f} | "
            + " | ".join(med(p) for p in PHASES)
            + " |"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv  # recorded with the results
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", nargs="*", default=KEYED, help="default: the keyed-state jobs")
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--events", type=int, default=5, help="events per run per stream")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--work", default=None, help="folder for the data roots (default: tmp)")
    parser.add_argument("--keep", action="store_true", help="keep the data roots")
    parser.add_argument(
        "--results",
        default=str(default_results("query_start.json")),
        help="where the JSON goes (default: the data root's results/)",
    )
    args = parser.parse_args(argv)
    if args.work:
        Path(args.work).mkdir(parents=True, exist_ok=True)
    base = TidemarkConfig.from_env()
    spark = get_spark(base)
    started = time.monotonic()
    runs: list[dict] = []
    for job in args.jobs:
        print(f"{job}: {args.runs} runs of {args.events} events per stream", flush=True)
        runs.extend(measure(spark, base, job, args))
    Path(args.results).write_text(
        json.dumps(
            {
                "command": "tools/benchmarks/query_start.py " + " ".join(argv),
                "machine": f"{platform.machine()}, {os.cpu_count()} cores",
                "seconds": round(time.monotonic() - started),
                "runs": runs,
            },
            indent=1,
        )
    )
    print("\n".join(table(runs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
