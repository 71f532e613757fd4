"""Benchmark: failed_txn_velocity's pane-based sliding window against Spark's built-in window().

    make bench                 # 2,000,000 transactions, 5 waves (about 15 minutes on 2 cores)
    .venv/bin/python tools/benchmarks/sliding_window.py --events 200000 --waves 2   # quick

On the same bronze data, in one process (one SparkSession, `local[2]`), it runs:

1. ``builtin 60s/5s``: dedup, FAILED, ``groupBy(user, window(event_time, '60 seconds',
   '5 seconds')).count()``, append to Delta: Spark's sliding window, 12 copies of each event;
2. ``panes 60s/5s``: the job's own ``build`` with the same window (change points);
3. ``panes 24h/5s``: the job as declared (the motivating query). The built-in window cannot
   run it: 17,280 copies of each event.

Both are streamed incrementally, as tidemark runs them: each wave is landed, ingested into
bronze, and every query then processes it with ``availableNow``. A query's time is the sum of
its runs' wall time (query start to end, checkpoint commits included), and events per second is
bronze rows read / that time. The two 60s/5s outputs are checked equal: the change points are
expanded back into one row per non-empty window and compared with the built-in rows.

State is reported per operator, as the peak over the run's batches: the window state (the
built-in aggregation's windows, or the panes job's per-user pane arrays: one state row per user
holding its panes) apart from the deduplication state both share. It prints a markdown table
(paste it into docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.storage.generator import GeneratorConfig, generate, write_files
from streaming_jobs.storage.registry import get_job
from streaming_jobs.stateful.dedup import dedup_within_watermark
from streaming_jobs.storage.lake import read_table
from streaming_jobs.runtime.runner import run_bronze, run_job
from streaming_jobs.storage.spark import get_spark


def builtin_window(events: DataFrame, *, window: str, slide: str, watermark: str) -> DataFrame:
    """The same query with Spark's sliding window(): one output row per non-empty window."""
    # the same deduplication as the job's: of the FAILED transactions only (JobSpec.reads)
    failed = dedup_within_watermark(events, "event_time", watermark, reads="status = 'FAILED'")
    return (
        failed.groupBy("user_id", F.window("event_time", window, slide).alias("w"))
        .agg(F.count(F.lit(1)).alias("failed_count"))
        .select(
            "user_id",
            F.col("w.start").alias("window_start"),
            F.col("w.end").alias("window_end"),
            "failed_count",
        )
    )


def expand_change_points(points: DataFrame, slide_s: int, watermark) -> DataFrame:
    """One row per non-empty window from change points (each holds until the next one)."""
    step = F.expr(f"make_interval(0, 0, 0, 0, 0, 0, {slide_s})")
    nxt = F.lead("window_end").over(Window.partitionBy("user_id").orderBy("window_end"))
    until = F.coalesce(nxt, F.lit(watermark).cast("timestamp") + step)
    width = F.col("window_end") - F.col("window_start")
    # the next change point ends a row's span, including a fall to 0: lead before filtering
    return (
        points.withColumn("until", until)
        .where("failed_count > 0")
        .select(
            "user_id",
            "failed_count",
            width.alias("width"),
            F.explode(F.sequence("window_end", F.col("until") - step, step)).alias("end"),
        )
        .select(
            "user_id",
            (F.col("end") - F.col("width")).alias("window_start"),
            F.col("end").alias("window_end"),
            "failed_count",
        )
    )


def peak_state(spark, cfg: TidemarkConfig, job: str) -> dict[str, tuple[int, int]]:
    """Per stateful operator: the peak rows and memory bytes over the job's batches."""
    ops = (
        read_table(spark, cfg.paths.table("ops", "stream_progress"))
        .where(f"job = '{job}'")
        .select(F.explode("state_operators").alias("op"))
        .groupBy("op.operator")
        .agg(F.max("op.rows"), F.max("op.memory_bytes"))
        .collect()
    )
    return {r[0]: (int(r[1] or 0), int(r[2] or 0)) for r in ops}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--waves", type=int, default=5)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", action="store_true", help="keep the temporary data root")
    args = parser.parse_args(argv)

    root = Path(tempfile.mkdtemp(prefix="tidemark-bench-"))
    os.environ["TIDEMARK_DATA_ROOT"] = str(root)
    cfg = TidemarkConfig.from_env().with_data_root(root)
    spark = get_spark(cfg)
    job = get_job("failed_txn_velocity")
    queries = {
        "builtin 60s/5s": replace(
            job,
            name="bench_builtin_60s",
            build=builtin_window,
            params={"window": "60 seconds", "slide": "5 seconds"},
        ),
        "panes 60s/5s": replace(
            job, name="bench_panes_60s", params={"window": "60 seconds", "slide": "5 seconds"}
        ),
        "panes 24h/5s": replace(job, name="bench_panes_24h"),
    }
    gen = GeneratorConfig(
        stream="transactions", events=args.events, files=args.waves, seed=args.seed
    )
    started = time.monotonic()
    files = generate(gen)
    print(
        f"generated {sum(map(len, files)):,} lines in {time.monotonic() - started:.0f}s", flush=True
    )

    seconds = dict.fromkeys(queries, 0.0)
    rows_in = dict.fromkeys(queries, 0)
    ingest_s = 0.0
    for wave in range(args.waves):
        write_files(cfg.paths.landing_dir("transactions"), gen, files, range(wave, wave + 1))
        t0 = time.monotonic()
        run_bronze(spark, cfg, "transactions")
        ingest_s += time.monotonic() - t0
        for label, spec in queries.items():
            t0 = time.monotonic()
            metrics = run_job(spark, cfg, spec)
            seconds[label] += time.monotonic() - t0
            rows_in[label] += metrics.input_rows
        print(
            f"wave {wave + 1}/{args.waves}: "
            + ", ".join(f"{label} {seconds[label]:.0f}s" for label in queries),
            flush=True,
        )

    builtin = read_table(spark, cfg.paths.table("gold", "bench_builtin_60s"))
    panes = read_table(spark, cfg.paths.table("gold", "bench_panes_60s"))
    watermark = (
        read_table(spark, cfg.paths.table("ops", "stream_progress"))
        .where("job = 'bench_panes_60s'")
        .agg(F.max("watermark"))
        .collect()[0][0]
    )
    expanded = expand_change_points(panes, 5, watermark)
    differ = (builtin.exceptAll(expanded).count(), expanded.exceptAll(builtin).count())
    equal = differ == (0, 0)

    bronze_rows = read_table(spark, cfg.paths.table("bronze", "transactions")).count()
    lines = [
        f"{args.events:,} transactions generated ({bronze_rows:,} valid bronze rows, "
        f"{args.waves} waves), `local[2]`, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, Spark {spark.version}; bronze ingestion {ingest_s:.0f}s.",
        "",
        "| query | bronze rows read | seconds | events/s | output rows | peak window state rows "
        "| peak window state memory (MB) | peak dedup state rows |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, spec in queries.items():
        out = read_table(spark, cfg.paths.table("gold", spec.name)).count()
        peaks = peak_state(spark, cfg, spec.name)
        dedup = peaks.pop("dedupeWithinWatermark", (0, 0))
        window_rows = sum(rows for rows, _ in peaks.values())
        window_bytes = sum(memory for _, memory in peaks.values())
        lines.append(
            f"| {label} | {rows_in[label]:,} | {seconds[label]:.1f} | "
            f"{rows_in[label] / seconds[label]:,.0f} | {out:,} | {window_rows:,} | "
            f"{window_bytes / 1e6:.1f} | {dedup[0]:,} |"
        )
    ratio = seconds["builtin 60s/5s"] / seconds["panes 60s/5s"]
    lines += [
        "",
        f"60s/5s: panes / builtin throughput ratio = {ratio:.2f} "
        f"(>1: panes faster). Outputs equal once change points are expanded to windows: "
        f"{'yes' if equal else f'NO ({differ[0]} builtin rows missing, {differ[1]} extra)'} "
        f"({builtin.count():,} window rows).",
    ]
    table = "\n".join(lines)
    print(table)
    spark.stop()
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if equal else 1


if __name__ == "__main__":
    raise SystemExit(main())
