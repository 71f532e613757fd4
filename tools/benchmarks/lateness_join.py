"""Benchmark: reconciliation's lateness replay, joining each bronze row to the stream batch that
read it, as a range join against the same join on one bronze version per row.

    .venv/bin/python tools/benchmarks/lateness_join.py --events 1000000 --batches 500 2000 5760

`classify_lateness` (dbt_project/macros/lateness.sql) finds, for every bronze row, the job's batch
whose read range (version_from, version_to] holds the row's commit version. Written as a range
condition, Spark has no key to hash on and compares every row with every batch
(BroadcastNestedLoopJoin): rows x batches. A continuous run at a 15 s trigger commits 5,760
batches a day per job, so the replay's cost grew with the history of batches. Expanded to one
row per version a batch read (``explode(sequence(version_from + 1, version_to))``), the same
match is an equi-join on the version (a hash join): rows + versions.

Per batch count, one SparkSession (``local[2]``): the seconds of each form (best of
``--repeat``), the plan's join, and whether both forms gave the same counts (rows, rows matched
to a batch, late rows). Prints a markdown table and writes ``--results`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

from streaming_jobs.core.config import TidemarkConfig, default_results
from streaming_jobs.storage.spark import get_spark

# the macro's two forms, over the views `events` and `batches`
RANGE = """
select count(*) as events_total, count(batches.batch_id) as seen_by_stream,
       count_if(events.event_time <= batches.late_threshold) as late
from events left join batches
    on events.bronze_version > batches.version_from
    and events.bronze_version <= batches.version_to
"""
BY_VERSION = """
select count(*) as events_total, count(batches.batch_id) as seen_by_stream,
       count_if(events.event_time <= batches.late_threshold) as late
from events left join (
    select batch_id, late_threshold, read_version
    from batches
    lateral view explode(
        if(version_to > version_from, sequence(version_from + 1, version_to), array())
    ) versions as read_version
) as batches
    on events.bronze_version = batches.read_version
"""


def views(spark, events: int, batches: int, versions_per_batch: int) -> None:
    """``events`` bronze rows over ``batches * versions_per_batch`` commit versions, and the
    batches that read them in order; the last batch has not read its versions yet (the rows
    the stream has not reached), and each batch's late threshold is 30 s behind its first
    row's time, so some rows are late."""
    versions = batches * versions_per_batch
    spark.range(events).selectExpr(
        f"id % {versions + versions_per_batch} as bronze_version",
        f"timestamp_seconds(1767225600 + (id % {versions + versions_per_batch}) * 15 "
        "- (id % 7) * 10) as event_time",
    ).cache().createOrReplaceTempView("events")
    spark.range(batches).selectExpr(
        "id as batch_id",
        f"id * {versions_per_batch} - 1 as version_from",
        f"id * {versions_per_batch} + {versions_per_batch} - 1 as version_to",
        f"timestamp_seconds(1767225600 + id * {versions_per_batch} * 15 - 30) as late_threshold",
    ).cache().createOrReplaceTempView("batches")
    spark.sql("select count(*) from events").collect()
    spark.sql("select count(*) from batches").collect()


def timed(spark, sql: str, repeat: int) -> tuple[float, tuple, str]:
    """Best seconds of ``repeat`` runs, the counts, and the plan's join operator."""
    plan = spark.sql(sql)._jdf.queryExecution().executedPlan().toString()
    join = next(
        (
            op
            for op in ("BroadcastNestedLoopJoin", "BroadcastHashJoin", "SortMergeJoin")
            if op in plan
        ),
        "other",
    )
    best, counts = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        counts = tuple(spark.sql(sql).collect()[0])
        best = min(best, time.perf_counter() - start)
    return best, counts, join


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--batches", type=int, nargs="+", default=[500, 2000, 5760])
    parser.add_argument("--versions-per-batch", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument(
        "--results",
        default=str(default_results("lateness_join.json")),
        help="where the JSON goes (default: the data root's results/)",
    )
    args = parser.parse_args()
    spark = get_spark(TidemarkConfig.from_env())
    rows = []
    for batches in args.batches:
        views(spark, args.events, batches, args.versions_per_batch)
        timed(spark, BY_VERSION, 1)  # warm-up
        by_range = timed(spark, RANGE, args.repeat)
        by_version = timed(spark, BY_VERSION, args.repeat)
        rows.append(
            {
                "batches": batches,
                "events": args.events,
                "range_seconds": round(by_range[0], 3),
                "range_join": by_range[2],
                "by_version_seconds": round(by_version[0], 3),
                "by_version_join": by_version[2],
                "counts": list(by_version[1]),
                "same_counts": by_range[1] == by_version[1],
            }
        )
        spark.catalog.clearCache()
    print("| batches | events | range join s | by version s | joins | same counts |")
    print("|---:|---:|---:|---:|---|---|")
    for r in rows:
        print(
            f"| {r['batches']:,} | {r['events']:,} | {r['range_seconds']} | "
            f"{r['by_version_seconds']} | {r['range_join']} / {r['by_version_join']} | "
            f"{'yes' if r['same_counts'] else 'NO'} |"
        )
    Path(args.results).write_text(
        json.dumps(
            {
                "command": "tools/benchmarks/lateness_join.py",
                "args": {k: v for k, v in vars(args).items() if k != "results"},
                "machine": platform.platform(),
                "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "rows": rows,
            },
            indent=2,
        )
    )
    print(f"results: {args.results}")


if __name__ == "__main__":
    main()
