"""Benchmark: a driver JVM's start with and without the class archive `tidemark setup` builds.

    .venv/bin/python tools/benchmarks/jvm_start.py --runs 3

What every ``tidemark-dbt`` invocation on the session target and every Dagster run process
pay before their first statement, in a new process each time, alternating
with and without ``-XX:SharedArchiveFile`` (the only difference; `streaming_jobs.storage.spark`,
``build_class_archive``):

1. ``session``: the JVM and the SparkSession with dbt's settings (the Hive metastore);
2. ``metastore``: the first ``show databases`` (the Hive client and Derby);
3. ``delta``: the first read of a Delta table (``ops/stream_progress``) and a count of it.

The data root is ``TIDEMARK_DATA_ROOT`` (``make setup``'s by default: its ops tables exist).
Prints each run and a markdown table of the medians for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

STEPS = ("session", "metastore", "delta")


def one_start(with_archive: bool) -> dict[str, float]:
    """This script in a new process: one start, timed by step."""
    done = subprocess.run(
        [sys.executable, __file__, "--one", "on" if with_archive else "off"],
        capture_output=True,
        text=True,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"a start failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return json.loads(lines[-1])


def timed_start(with_archive: bool) -> None:
    from streaming_jobs.core.config import TidemarkConfig
    from streaming_jobs.storage.spark import cached_jars, class_archive, spark_conf, start_session

    cfg = TidemarkConfig.from_env()
    archive = class_archive(cfg, cached_jars(cfg))
    if with_archive and (archive is None or not archive.is_file()):
        raise SystemExit(f"no class archive in {cfg.spark.jars_cache}: run 'tidemark setup'")
    conf = spark_conf(cfg, hive_metastore=True)
    if not with_archive:
        conf["spark.driver.extraJavaOptions"] = " ".join(
            option
            for option in conf["spark.driver.extraJavaOptions"].split()
            if not option.startswith(("-XX:SharedArchiveFile", "-Xlog:cds"))
        )
    took = {}
    started = time.monotonic()
    spark = start_session(cfg, conf)
    took["session"] = time.monotonic() - started
    started = time.monotonic()
    spark.sql("show databases").collect()
    took["metastore"] = time.monotonic() - started
    started = time.monotonic()
    spark.read.format("delta").load(str(cfg.paths.table("ops", "stream_progress"))).count()
    took["delta"] = time.monotonic() - started
    print(json.dumps(took), flush=True)
    spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="starts of each kind, alternating")
    parser.add_argument("--one", choices=("on", "off"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        timed_start(args.one == "on")
        return
    runs: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    for i in range(args.runs):
        for with_archive in (False, True):
            took = one_start(with_archive)
            runs[with_archive].append(took)
            print(
                f"run {i + 1}, archive {'on ' if with_archive else 'off'}: "
                + ", ".join(f"{step} {took[step]:.1f} s" for step in STEPS)
                + f", total {sum(took.values()):.1f} s",
                flush=True,
            )
    print("\n| step | without the archive (s) | with it (s) |\n|---|---:|---:|")
    for step in (*STEPS, "total"):

        def median(with_archive: bool) -> float:
            return statistics.median(
                sum(r.values()) if step == "total" else r[step] for r in runs[with_archive]
            )

        print(f"| {step} | {median(False):.1f} | {median(True):.1f} |")


if __name__ == "__main__":
    main()
