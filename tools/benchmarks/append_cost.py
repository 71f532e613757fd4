"""Benchmark: what one Delta write of a handful of rows costs, by what the table asks of it.

    .venv/bin/python tools/benchmarks/append_cost.py                 # 12 writes per case, twice

A micro-batch of a handful of events ends in writes like these (bronze's append, gold's append
or MERGE), so their fixed cost is most of a small batch's. Six cases, each on a fresh table in
one SparkSession (``local[2]``, warmed up first on a table of its own), each write after the
first two timed:

- appends: row tracking on (bronze: ``delta.enableRowTracking``) or off;
- MERGEs of 5 rows on a key (an update-mode job's gold, `lake.merge_once` / `merge_marked`) into
  a table of 400 rows, 4 keys it holds and 1 new;
- exactly-once by Delta's key (``txnAppId``/``txnVersion``: bronze, and gold on an object
  store) or by tidemark's own marker, checked in the newest commits first
  (`delta_log.batch_written`: gold on local disk).

Per case: the median seconds of a write and the Spark jobs it ran (Delta's state rebuild,
"Compute snapshot", is some of them). Prints a markdown table and writes ``--results`` (JSON).
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
from streaming_jobs.storage.lake import (
    ROW_TRACKING,
    append_marked,
    append_once,
    ensure_table,
    merge_marked,
    merge_once,
)
from streaming_jobs.storage.spark import get_spark

SCHEMA = StructType([StructField("id", StringType()), StructField("n", LongType())])
# name: (table properties, MERGE or append, tidemark's marker or Delta's key)
CASES = {
    "append, row tracking, Delta's key": (ROW_TRACKING, False, False),
    "append, row tracking, tidemark's marker": (ROW_TRACKING, False, True),
    "append, no row tracking, Delta's key": ({}, False, False),
    "append, no row tracking, tidemark's marker": ({}, False, True),
    "MERGE, Delta's key": ({}, True, False),
    "MERGE, tidemark's marker": ({}, True, True),
}
TABLE_ROWS = 400  # what a MERGE's table holds before the first timed write
WARMUP = 2


def writes(spark, path: Path, case: tuple, count: int) -> list[dict]:
    """``count`` writes of 5 rows into a fresh table at ``path``: seconds and Spark jobs each."""
    properties, merge, marked = case
    context = spark.sparkContext
    tracker = context.statusTracker()
    ensure_table(spark, path, SCHEMA, properties)
    if merge:
        rows = spark.createDataFrame([(f"k{i}", 0) for i in range(TABLE_ROWS)], SCHEMA)
        append_once(rows, path, "seed", 0)
    out = []
    for batch in range(count):
        # 5 rows: 4 keys the table holds (a MERGE updates them), 1 new (inserted)
        keys = [f"k{(batch * 4 + i) % TABLE_ROWS}" for i in range(4)] + [f"new{batch}"]
        rows = spark.createDataFrame([(k, batch) for k in keys], SCHEMA)
        group = f"write-{path.name}-{batch}"
        context.setJobGroup(group, group)
        started = time.perf_counter()
        if marked:
            if not batch_written(path, "bench", batch, None):
                if merge:
                    merge_marked(rows, path, ("id",), "bench", batch)
                else:
                    append_marked(rows, path, "bench", batch)
        elif merge:
            merge_once(rows, path, ("id",), "bench", batch)
        else:
            append_once(rows, path, "bench", batch)
        seconds = time.perf_counter() - started
        out.append({"seconds": seconds, "jobs": len(tracker.getJobIdsForGroup(group))})
    context.setJobGroup("", "")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writes", type=int, default=12, help="per case and round")
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
        # the JVM's first writes compile what every case runs: on tables of their own
        for number, case in enumerate({c[1:]: c for c in CASES.values()}.values()):
            writes(spark, Path(root) / f"warm-up-{number}", case, WARMUP + 2)
        for turn in range(args.rounds):
            for number, (name, case) in enumerate(CASES.items()):
                done = writes(spark, Path(root) / f"{turn}-{number}", case, args.writes)
                measured[name] += done[WARMUP:]
    print("| write of 5 rows | median s | Spark jobs (median) |\n|---|---:|---:|")
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
                f"--writes {args.writes} --rounds {args.rounds}",
                "machine": platform.platform(),
                "summary": summary,
                "writes": measured,
            },
            indent=2,
        )
    )
    print(f"results: {args.results}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
