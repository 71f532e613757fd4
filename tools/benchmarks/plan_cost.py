"""Benchmark: what Spark's driver spends planning each dbt model, in a new JVM and a warm one.

    .venv/bin/python tools/benchmarks/plan_cost.py --data-root <a root dbt has built> --rounds 2

Reads the models dbt compiled last under the data root (``dbt/target/compiled``), and for each
one has a SparkSession (streaming_jobs.storage.spark's, with the data root's metastore) parse, analyze,
optimize and plan it, without running it: Spark's own phase times (``QueryPlanningTracker``)
and the wall time. Round 0 is a new JVM's, each later round the same statements again in the
now warm JVM. ``TIDEMARK_SPARK_CONF`` and ``JAVA_TOOL_OPTIONS`` change the settings compared.
Needs the metastore: stop the data root's SQL endpoint first.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path


def phases(query_execution) -> dict[str, int]:
    """Spark's planning phases of a statement, in milliseconds."""
    out, items = {}, query_execution.tracker().phases().iterator()
    while items.hasNext():
        item = items.next()
        out[item._1()] = item._2().durationMs()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-root", required=True, type=Path)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    os.environ["TIDEMARK_DATA_ROOT"] = str(args.data_root)
    from streaming_jobs.core.config import TidemarkConfig
    from streaming_jobs.storage.spark import get_spark

    cfg = TidemarkConfig.from_env()
    models = sorted((cfg.paths.dbt / "target" / "compiled").glob("*/models/*/*.sql"))
    if not models:
        raise SystemExit(
            f"plan_cost: no compiled models under {cfg.paths.dbt / 'target'}; "
            "run 'tidemark-dbt build' on this data root first"
        )
    spark = get_spark(cfg, hive_metastore=True)
    print("| round | model | wall (s) | parsing | analysis | optimization | planning (ms) |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    totals = []
    for round_no in range(args.rounds):
        total = 0.0
        for path in models:
            started = time.perf_counter()
            query = spark.sql(path.read_text())._jdf.queryExecution()
            query.executedPlan()
            took = time.perf_counter() - started
            total += took
            p = phases(query)
            print(
                f"| {round_no} | {path.stem} | {took:.2f} | {p.get('parsing', 0)} | "
                f"{p.get('analysis', 0)} | {p.get('optimization', 0)} | "
                f"{p.get('planning', 0)} |",
                flush=True,
            )
        totals.append(total)
    print(
        "\n"
        + "; ".join(f"round {i}: {t:.1f} s for {len(models)} models" for i, t in enumerate(totals))
    )
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
