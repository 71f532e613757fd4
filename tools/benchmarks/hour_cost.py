"""Benchmark: what one more hour costs to ingest and stream, after a short or a long history.

    .venv/bin/python tools/benchmarks/hour_cost.py --events 2000000 --days 10 --runs 6
    .venv/bin/python tools/benchmarks/hour_cost.py --events 2000000 --days 10 --history-hours 24

The five demo streams' events (``--events`` in all) spread over ``--days`` days of event time,
generated into hourly files (file k: the k-th hour of event time of every stream). The first
``--history-hours`` land at once and are ingested and streamed by every job, as a first run
after a backlog meets them; then each of ``--runs`` more hours lands on its own and is run by a
new Spark session (the state stores are loaded again from the checkpoints, as a new Dagster
run or `tidemark run` process loads them). For every run and query: its wall time, and for each
stateful job what loading its state cost (Spark's RocksDB metrics in the run's first batch:
the changelog files replayed, the load's milliseconds) and the snapshots its checkpoint holds.
Prints markdown tables for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

DEMO_STREAMS = ("transactions", "rides", "orders", "payments", "clicks")


def land_and_run(cfg, gens, pending: Path, hours: range) -> dict[str, dict]:
    """Move those hours' files into landing; ingest every stream and run every job in a new
    Spark session; per query: seconds, batches, input rows."""
    from streaming_jobs.storage.generator import file_name
    from streaming_jobs.storage.registry import registry
    from streaming_jobs.runtime.runner import run_bronze, run_job
    from streaming_jobs.storage.spark import get_spark

    for gen in gens:
        landing = cfg.paths.landing_dir(gen.stream)
        landing.mkdir(parents=True, exist_ok=True)
        for hour in hours:
            os.replace(pending / gen.stream / file_name(gen, hour), landing / file_name(gen, hour))
    spark = get_spark(cfg)
    out = {}
    try:
        for gen in gens:
            started = time.monotonic()
            m = run_bronze(spark, cfg, gen.stream)
            out[f"bronze_{gen.stream}"] = {
                "seconds": time.monotonic() - started,
                "batches": m.batches,
                "rows": m.input_rows,
            }
        for spec in registry().values():
            started = time.monotonic()
            m = run_job(spark, cfg, spec)
            out[spec.name] = {
                "seconds": time.monotonic() - started,
                "batches": m.batches,
                "rows": m.input_rows,
                "state_rows": m.state_rows,
            }
    finally:
        spark.stop()
    return out


def state_loads(cfg, since_batch: dict[str, int]) -> dict[str, dict]:
    """Per stateful job, its first batch after ``since_batch``: changelog files replayed and the
    slowest store load (ms) over its operators; and the snapshots its checkpoint holds."""
    from deltalake import DeltaTable

    progress = (
        DeltaTable(str(cfg.paths.table("ops", "stream_progress")))
        .to_pyarrow_table(columns=["job", "batch_id", "progress_json"])
        .to_pylist()
    )
    out = {}
    for job, after in since_batch.items():
        rows = sorted(
            (r for r in progress if r["job"] == job and r["batch_id"] > after),
            key=lambda r: r["batch_id"],
        )
        if not rows:
            continue
        operators = json.loads(rows[0]["progress_json"]).get("stateOperators", [])
        metrics = [op.get("customMetrics", {}) for op in operators]
        state = cfg.paths.checkpoint(job) / "state"
        out[job] = {
            "replayed": sum(m.get("rocksdbNumReplayChangelogFiles", 0) for m in metrics),
            "load_ms": max((m.get("rocksdbLoadLatencyMs", 0) for m in metrics), default=0),
            "snapshots": len(list(state.rglob("*.zip"))) if state.is_dir() else 0,
        }
    return out


def last_batches(cfg) -> dict[str, int]:
    from streaming_jobs.core.checkpoints import last_committed_batch
    from streaming_jobs.storage.registry import registry

    return {name: last_committed_batch(cfg.paths.checkpoint(name)) or -1 for name in registry()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--days", type=float, default=10.0)
    parser.add_argument(
        "--history-hours",
        type=int,
        default=None,
        help="hours landed at once first (default: all but --runs)",
    )
    parser.add_argument("--runs", type=int, default=2, help="hours then run one at a time")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", action="store_true", help="keep the data root")
    args = parser.parse_args(argv)
    hours = round(args.days * 24)
    history = args.history_hours if args.history_hours is not None else hours - args.runs
    if history + args.runs > hours:
        parser.error(f"--history-hours {history} + --runs {args.runs} exceed the {hours} hours")

    root = Path(tempfile.mkdtemp(prefix="tidemark-hour-cost-"))
    os.environ["TIDEMARK_DATA_ROOT"] = str(root)
    from streaming_jobs.core.config import TidemarkConfig
    from streaming_jobs.storage.generator import GeneratorConfig, generate_by_time, write_files

    cfg = TidemarkConfig.from_env().with_data_root(root)
    pending = root / "pending"
    per_stream = args.events // len(DEMO_STREAMS)
    rate = per_stream / (args.days * 86_400)
    started = time.monotonic()
    gens = []
    for stream in DEMO_STREAMS:
        gen = GeneratorConfig(
            stream=stream, events=per_stream, files=hours, seed=args.seed, rate=rate
        )
        write_files(pending / stream, gen, generate_by_time(gen, 3600.0))
        gens.append(gen)
    print(
        f"generated {hours} hourly files per stream ({rate:.2f} events/s per stream) in "
        f"{time.monotonic() - started:.0f}s; data root {root}",
        flush=True,
    )

    started = time.monotonic()
    first = land_and_run(cfg, gens, pending, range(0, history))
    print(
        f"history: {history} hours landed at once, run in {time.monotonic() - started:.0f}s",
        flush=True,
    )
    runs = []
    for hour in range(history, history + args.runs):
        before = last_batches(cfg)
        started = time.monotonic()
        queries = land_and_run(cfg, gens, pending, range(hour, hour + 1))
        wall = time.monotonic() - started
        runs.append((hour, wall, queries, state_loads(cfg, before)))
        print(
            f"hour {hour}: {wall:.0f}s "
            + json.dumps({q: round(v["seconds"], 1) for q, v in queries.items()}),
            flush=True,
        )

    jobs = [q for q in first if not q.startswith("bronze_")]
    print(
        f"\n| hour (after {history} h of history) | run (s) | "
        + " | ".join(f"`{j}` s / changelogs replayed / load ms" for j in jobs)
        + " |"
    )
    print("|---:|---:|" + "---:|" * len(jobs))
    for hour, wall, queries, loads in runs:
        cells = []
        for job in jobs:
            load = loads.get(job, {})
            cells.append(
                f"{queries[job]['seconds']:.1f} / {load.get('replayed', '-')} / "
                f"{load.get('load_ms', '-')}"
            )
        print(f"| {hour} | {wall:.0f} | " + " | ".join(cells) + " |")
    print(
        "\nsnapshots in each job's checkpoint after the last run: "
        + ", ".join(f"{job} {runs[-1][3].get(job, {}).get('snapshots', '-')}" for job in jobs)
        if runs
        else ""
    )
    if args.keep:
        print(f"data root kept: {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
