"""Benchmark: Kafka -> bronze -> a stateful job, next to the landing-file path, same events.

    make bench-kafka                                            # 200,000 transactions, 2 rounds
    .venv/bin/python tools/benchmarks/kafka_source.py --events 50000 --rounds 1   # quick

One process, one SparkSession (``local[2]``), the project's own broker (KRaft, 127.0.0.1) in a
JVM of its own. The same generated transactions go:

- **landing**: written as ``--files`` JSON lines files into a fresh data root's landing folder;
- **kafka**: published to a fresh topic of ``--partitions`` partitions (keyed by event id);
  the publish is timed apart: it is the producer's cost, not tidemark's.

Then, for each path on its own data root: bronze ingestion (``availableNow``: everything there,
one batch) and ``failed_txn_velocity`` (dedup, 24 h window sliding every 5 s, keyed state) over
that bronze. Events per second is lines (records) in / seconds. Rounds alternate the order
(landing first, then Kafka first) so that neither path always gets the warmer JVM. Both paths
must give the same bronze row count and the same gold rows, or the benchmark fails. It prints a
markdown table (paste it into docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

from streaming_jobs.services import kafka_broker
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.storage.generator import GeneratorConfig, generate, publish_files, write_files
from streaming_jobs.storage.lake import read_table
from streaming_jobs.services.processes import free_port
from streaming_jobs.storage.registry import get_job
from streaming_jobs.runtime.runner import run_bronze, run_job
from streaming_jobs.storage.spark import get_spark

JOB = "failed_txn_velocity"


def _gold(spark, cfg: TidemarkConfig) -> Counter:
    return Counter(tuple(r) for r in read_table(spark, cfg.paths.table("gold", JOB)).collect())


def one_path(spark, cfg: TidemarkConfig, path: str, gen: GeneratorConfig, files) -> dict:
    lines = sum(len(f) for f in files)
    started = time.monotonic()
    if path == "kafka":
        publish_files(cfg, gen, files)
    else:
        write_files(cfg.paths.landing_dir(gen.stream), gen, files)
    delivered = time.monotonic() - started
    started = time.monotonic()
    bronze = run_bronze(spark, cfg, gen.stream)
    ingest = time.monotonic() - started
    started = time.monotonic()
    run_job(spark, cfg, get_job(JOB))
    job = time.monotonic() - started
    return {
        "path": path,
        "lines": lines,
        "deliver_s": delivered,
        "bronze_s": ingest,
        "bronze_rows": bronze.output_rows,
        "quarantined": bronze.quarantined_rows,
        "job_s": job,
        "gold": _gold(spark, cfg),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=31)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="tidemark-bench-kafka-"))
    base = TidemarkConfig.from_env(
        {
            **os.environ,
            "TIDEMARK_DATA_ROOT": str(work / "broker"),
            "TIDEMARK_KAFKA_PORT": str(free_port()),
            "TIDEMARK_KAFKA_PARTITIONS": str(args.partitions),
        }
    )
    broker = kafka_broker.start(base)
    rows = []
    try:
        spark = get_spark(base.with_data_root(work / "session"))
        gen = GeneratorConfig(
            stream="transactions", events=args.events, files=args.files, seed=args.seed
        )
        files = generate(gen)
        for number in range(args.rounds):
            order = ("landing", "kafka") if number % 2 == 0 else ("kafka", "landing")
            results = {}
            for path in order:
                cfg = replace(
                    base.with_data_root(work / f"{path}-{number}"),
                    kafka=replace(
                        base.kafka,
                        source=path,
                        bootstrap=broker.bootstrap,
                        topic_prefix=f"bench{number}.",
                    ),
                )
                results[path] = one_path(spark, cfg, path, gen, files)
                results[path]["round"] = number + 1
            landing, kafka = results["landing"], results["kafka"]
            if (landing["bronze_rows"], landing["gold"]) != (kafka["bronze_rows"], kafka["gold"]):
                raise SystemExit(
                    "the two paths disagree: bronze "
                    f"{landing['bronze_rows']} vs {kafka['bronze_rows']}, gold "
                    f"{sum(landing['gold'].values())} vs "
                    f"{sum(kafka['gold'].values())} rows"
                )
            rows += [results[p] for p in order]
    finally:
        kafka_broker.stop(base)
        shutil.rmtree(work, ignore_errors=True)

    print(
        f"\n{args.events:,} transactions ({rows[0]['lines']:,} lines with duplicates and "
        f"malformed), {args.files} files / {args.partitions} partitions, {platform.machine()}, "
        f"{os.cpu_count()} cores, local[2]\n"
    )
    print(
        "| round | path | deliver (s) | bronze (s) | bronze lines/s | job (s) | job rows/s | "
        "bronze + job (s) | end-to-end lines/s | bronze rows | gold rows |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        total = r["bronze_s"] + r["job_s"]
        print(
            f"| {r['round']} | {r['path']} | {r['deliver_s']:.1f} | {r['bronze_s']:.1f} | "
            f"{r['lines'] / r['bronze_s']:,.0f} | {r['job_s']:.1f} | "
            f"{r['bronze_rows'] / r['job_s']:,.0f} | {total:.1f} | {r['lines'] / total:,.0f} | "
            f"{r['bronze_rows']:,} | {sum(r['gold'].values()):,} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
