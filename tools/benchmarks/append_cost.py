"""Benchmark: what one Delta append of a handful of rows costs, by what the table asks of it.

    .venv/bin/python tools/benchmarks/append_cost.py                 # 12 appends per case, twice

A micro-batch of a handful of events ends in appends like these (bronze's, gold's), so their
fixed cost is most of a small batch's. Four cases, each on a fresh table in one SparkSession
(``local[2]``, warmed up first on a table of its own), each append after the first two
timed:

- row tracking on (bronze: ``delta.enableRowTracking``) or off;
- exactly-once by Delta's key (``txnAppId``/``txnVersion``, `lake.append_once`: bronze, and
  gold on an object store) or by tidemark's own marker, checked in the newest commits first
  (`lake.append_marked` and `delta_log.batch_written`: gold on local disk).

Per case: the median seconds of an append and the Spark jobs it ran (one is the write; Delta's
state rebuild, "Compute snapshot", is the others). Prints a markdown table and writes
``--results`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

from pyspark.sql.types import LongType, StringType, StructField, StructType

from streaming_jobs.core.config import TidemarkConfig, default_results
from streaming_jobs.core.delta_log import batch_written
from streaming_jobs.storage.lake import ROW_TRACKING, append_marked, append_once, ensure_table
from streaming_jobs.storage.spark import get_spark

SCHEMA = StructType([StructField("id", StringType()), StructField("n", LongType())])
CASES = {
    "row tracking, Delta's key": (ROW_TRACKING, False),
    "row tracking, tidemark's marker": (ROW_TRACKING, True),
    "no row tracking, Delta's key": ({}, False),
    "no row tracking, tidemark's marker": ({}, True),
}
WARMUP = 2


def appends(spark, path: Path, properties: dict, marked: bool, count: int) -> list[dict]:
    """``count`` appends of 5 rows into a fresh table at ``path``: seconds and Spark jobs each."""
    context = spark.sparkContext
    tracker = context.statusTracker()
    ensure_table(spark, path, SCHEMA, properties)
    out = []
    for batch in range(count):
        rows = spark.createDataFrame([(f"k{i}", batch) for i in range(5)], SCHEMA)
        group = f"append-{path.name}-{batch}"
        context.setJobGroup(group, group)
        started = time.perf_counter()
        if marked:
            if not batch_written(path, "bench", batch, None):
                append_marked(rows, path, "bench", batch)
        else:
            append_once(rows, path, "bench", batch)
        seconds = time.perf_counter() - started
        out.append({"seconds": seconds, "jobs": len(tracker.getJobIdsForGroup(group))})
    context.setJobGroup("", "")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--appends", type=int, default=12, help="per case and round")
    parser.add_argument("--rounds", type=int, default=2, help="the cases in turn, this often")
    parser.add_argument(
        "--results",
        default=str(default_results("append_cost.json")),
        help="where the JSON goes (default: the data root's results/)",
    )
    args = parser.parse_args(argv)
    cfg = TidemarkConfig.from_env()
    spark = get_spark(cfg)
    measured: dict[str, list[dict]] = {name: [] for name in CASES}
    with tempfile.TemporaryDirectory(prefix="tidemark-appends-") as root:
        # the JVM's first appends compile what every case runs: on a table of their own
        appends(spark, Path(root) / "warm-up", ROW_TRACKING, False, 2 * args.appends)
        for turn in range(args.rounds):
            for number, (name, (properties, marked)) in enumerate(CASES.items()):
                done = appends(
                    spark, Path(root) / f"{turn}-{number}", properties, marked, args.appends
                )
                measured[name] += done[WARMUP:]
    print("| append of 5 rows | median s | Spark jobs (median) |\n|---|---:|---:|")
    summary = {}
    for name, runs in measured.items():
        summary[name] = {
            "median_seconds": round(statistics.median(r["seconds"] for r in runs), 3),
            "median_jobs": statistics.median(r["jobs"] for r in runs),
        }
        print(
            f"| {name} | {summary[name]['median_seconds']:.3f} | {summary[name]['median_jobs']:g} |"
        )
    Path(args.results).write_text(
        json.dumps(
            {
                "command": "tools/benchmarks/append_cost.py "
                f"--appends {args.appends} --rounds {args.rounds}",
                "machine": platform.platform(),
                "summary": summary,
                "appends": measured,
            },
            indent=2,
        )
    )
    print(f"results: {args.results}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
