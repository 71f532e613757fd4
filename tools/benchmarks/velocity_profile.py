"""Profile: where failed_txn_velocity's time goes, step by step, on the same bronze rows.

    make bench-velocity-profile                                   # 2,000,000 transactions
    .venv/bin/python tools/benchmarks/velocity_profile.py --events 200000     # quick

One data root, one SparkSession (`local[2]`), the events ingested into bronze once (one wave).
Then each step below runs as a query of its own over all of bronze, as tidemark runs a job
(`run_job`: `availableNow`, Delta sink, checkpoint), after a warm-up query that pays the JVM's
and the Python workers' first-use costs. Every step writes rows of the job's output schema, so
the sink's work is alike; what a step adds over the one before is the cost of what it adds:

1. ``scan``: read bronze, keep the FAILED rows, write them (no state): reading and the sink;
2. ``dedup all``: deduplicate every transaction within the watermark, then keep the FAILED
   ones: the deduplication state as the job had it;
3. ``dedup failed``: keep the FAILED rows first, then deduplicate them (``JobSpec.reads``);
4. ``job, dedup all (before)``: the job as it was, every transaction deduplicated, then the
   panes in keyed state;
5. ``job``: the job as declared now (``build``): the FAILED ones deduplicated, then the panes.

Events/s is bronze rows read over the query's wall time (start to stop, checkpoint commits
included). ``--repeat`` runs the whole ladder again on fresh checkpoints (the figure kept is
each step's fastest). It prints a markdown table and writes ``--results`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.storage.generator import GeneratorConfig, generate, write_files
from streaming_jobs.storage.registry import get_job
from streaming_jobs.runtime.runner import run_bronze, run_job
from streaming_jobs.storage.spark import get_spark
from streaming_jobs.stateful.dedup import dedup_within_watermark
from streaming_jobs.stateful.sliding import sliding_counts

FAILED = "status = 'FAILED'"


def as_output(rows: DataFrame) -> DataFrame:
    """FAILED rows in the job's output schema: one 'change point' per event, no state."""
    return rows.select(
        "user_id",
        F.col("event_time").alias("window_start"),
        F.col("event_time").alias("window_end"),
        F.lit(1).cast("long").alias("failed_count"),
    )


def scan(events: DataFrame, *, window: str, slide: str, watermark: str) -> DataFrame:
    return as_output(events.withWatermark("event_time", watermark).where(FAILED))


def dedup_all(events: DataFrame, *, window: str, slide: str, watermark: str) -> DataFrame:
    return as_output(dedup_within_watermark(events, "event_time", watermark).where(FAILED))


def dedup_failed(events: DataFrame, *, window: str, slide: str, watermark: str) -> DataFrame:
    return as_output(dedup_within_watermark(events, "event_time", watermark, reads=FAILED))


def dedup_collapsed(events: DataFrame, *, window: str, slide: str, watermark: str) -> DataFrame:
    timed = events.withWatermark("event_time", watermark)
    keyed = timed.withColumn("dedup_key", F.when(F.expr(FAILED), F.col("event_id")))
    return as_output(keyed.dropDuplicatesWithinWatermark(["dedup_key"]).where(FAILED))


def job_deduplicating_all(
    events: DataFrame, *, window: str, slide: str, watermark: str
) -> DataFrame:
    """The job as it was before ``reads``: every transaction deduplicated, then FAILED kept."""
    return sliding_counts(
        dedup_within_watermark(events, "event_time", watermark).where(FAILED),
        key="user_id",
        event_time="event_time",
        size=window,
        slide=slide,
        count_col="failed_count",
    )


STEPS = {
    "scan": scan,
    "dedup all": dedup_all,
    "dedup failed": dedup_failed,
    "dedup collapsed": dedup_collapsed,
    "job, dedup all (before)": job_deduplicating_all,
    "job": None,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--results", default=None, help="write the figures here (JSON)")
    args = parser.parse_args(argv)

    root = Path(tempfile.mkdtemp(prefix="tidemark-velocity-"))
    os.environ["TIDEMARK_DATA_ROOT"] = str(root)
    cfg = TidemarkConfig.from_env().with_data_root(root)
    spark = get_spark(cfg)
    job = get_job("failed_txn_velocity")
    gen = GeneratorConfig(stream="transactions", events=args.events, files=1, seed=args.seed)
    files = generate(gen)
    write_files(cfg.paths.landing_dir("transactions"), gen, files, range(0, 1))
    t0 = time.monotonic()
    run_bronze(spark, cfg, "transactions")
    ingest_s = time.monotonic() - t0
    print(f"{args.events:,} transactions ingested in {ingest_s:.1f}s", flush=True)

    # the warm-up: the JVM's code paths, Delta's, and a Python worker for the pane operator.
    # It is the job as declared, the first in its process: timed as "job, cold", the figure
    # `compare.py` reports as the job alone (it runs each engine's job once, in a new process)
    t0 = time.monotonic()
    cold = run_job(spark, cfg, replace(job, name="velocity_warmup"))
    cold_s = time.monotonic() - t0
    print(f"job, cold (first in its process): {cold_s:.1f}s, {cold.input_rows:,} rows in")
    runs: dict[str, list[dict]] = {step: [] for step in STEPS}
    for attempt in range(args.repeat):
        for step, build in STEPS.items():
            name = "".join(c if c.isalnum() else "_" for c in step)
            spec = replace(job, name=f"velocity_{name}_{attempt}", build=build or job.build)
            t0 = time.monotonic()
            m = run_job(spark, cfg, spec)
            seconds = time.monotonic() - t0
            runs[step].append(
                {
                    "seconds": seconds,
                    "input_rows": m.input_rows,
                    "output_rows": m.output_rows,
                    "state_rows": m.state_rows,
                    "late_rows_dropped": m.late_rows_dropped,
                }
            )
            print(
                f"{step} ({attempt + 1}/{args.repeat}): {seconds:.1f}s, "
                f"{m.input_rows:,} rows in, {m.output_rows:,} out",
                flush=True,
            )

    best = {step: min(r, key=lambda x: x["seconds"]) for step, r in runs.items()}
    lines = [
        f"{args.events:,} transactions (one wave; bronze ingestion {ingest_s:.0f}s), `local[2]`, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}, Spark {spark.version}; "
        f"fastest of {args.repeat}.",
        "",
        "| step | seconds | events/s | over scan (s) | output rows | state rows after |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    lines.append(
        f"| job, cold (first in its process) | {cold_s:.1f} | {cold.input_rows / cold_s:,.0f} "
        f"| | {cold.output_rows:,} | {cold.state_rows:,} |"
    )
    before = None
    for step, r in best.items():
        added = "" if before is None else f"{r['seconds'] - before:+.1f}"
        lines.append(
            f"| {step} | {r['seconds']:.1f} | {r['input_rows'] / r['seconds']:,.0f} "
            f"| {added} | {r['output_rows']:,} | {r['state_rows']:,} |"
        )
        if step == "scan":
            before = r["seconds"]
    table = "\n".join(lines)
    print(table)
    if args.results:
        Path(args.results).write_text(
            json.dumps(
                {
                    "command": f"velocity_profile.py --events {args.events} --repeat {args.repeat}",
                    "ingest_s": ingest_s,
                    "cold_job_s": cold_s,
                    "runs": runs,
                },
                indent=1,
            )
        )
    spark.stop()
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
