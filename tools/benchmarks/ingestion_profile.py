"""Profile: where bronze ingestion's time goes, step by step, on the same landed lines.

    .venv/bin/python tools/benchmarks/ingestion_profile.py --events 1000000
    make bench-ingestion-profile                                  # the same, 1,000,000 lines

One data root, one SparkSession (``local[2]``), one landed file of the generator's
transactions (its malformed and duplicate lines included). Each step reads the file as a batch
DataFrame, the way the landing source reads it (``lineSep`` ``\\n``), adds one more part of
`parse_lines` and is forced with Spark's ``noop`` sink, so a step's time over the one before is
what its part costs. The last row is the real thing: ``run_bronze`` (the stream, the parse, the
expectations, the duplicate-payload check, bronze's and quarantine's commits), on the same
file in a fresh data root. Fastest of ``--repeat``. It prints a markdown table and writes
``--results`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path

from pyspark.sql import functions as F

from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.core.validation import LINE, nesting_depth, parse_lines
from streaming_jobs.runtime.runner import run_bronze
from streaming_jobs.schemas import STREAMS
from streaming_jobs.storage.generator import GeneratorConfig, generate, write_files
from streaming_jobs.storage.spark import get_spark


def _steps(schema):
    line = F.col(LINE)
    one_value = F.json_array_length(F.concat(F.lit("["), line, F.lit("]")))
    return {
        "read text": lambda df: df,
        "+ from_json (typed fields)": lambda df: df.withColumn(
            "_raw", F.from_json(line, schema.raw_struct)
        ),
        "+ try_parse_json (variant)": lambda df: df.withColumn(
            "_raw", F.from_json(line, schema.raw_struct)
        ).withColumn("_variant", F.try_parse_json(line)),
        "+ json_array_length (one value)": lambda df: df.withColumn(
            "_raw", F.from_json(line, schema.raw_struct)
        )
        .withColumn("_variant", F.try_parse_json(line))
        .withColumn("_one", one_value),
        "nesting depth alone": lambda df: df.withColumn("_depth", nesting_depth(line)),
        "parse_lines (every rule)": lambda df: parse_lines(df, schema),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--results", default=None, help="write the figures here (JSON)")
    args = parser.parse_args(argv)

    root = Path(tempfile.mkdtemp(prefix="tidemark-ingest-profile-"))
    os.environ["TIDEMARK_DATA_ROOT"] = str(root)
    cfg = TidemarkConfig.from_env().with_data_root(root / "a")
    spark = get_spark(cfg)
    schema = STREAMS["transactions"]
    gen = GeneratorConfig(stream="transactions", events=args.events, files=1, seed=args.seed)
    files = generate(gen)
    lines = len(files[0])
    write_files(cfg.paths.landing_dir("transactions"), gen, files, range(0, 1))
    landed = str(cfg.paths.landing_dir("transactions"))

    def read():
        return spark.read.option("lineSep", "\n").text(landed).withColumnRenamed("value", LINE)

    read().write.format("noop").mode("overwrite").save()  # warm-up: the JVM's first use
    best: dict[str, float] = {}
    for _ in range(args.repeat):
        for step, build in _steps(schema).items():
            t0 = time.monotonic()
            build(read()).write.format("noop").mode("overwrite").save()
            seconds = time.monotonic() - t0
            best[step] = min(best.get(step, seconds), seconds)
            print(f"{step}: {seconds:.2f}s", flush=True)
    for attempt in range(args.repeat):
        fresh = TidemarkConfig.from_env().with_data_root(root / f"run{attempt}")
        write_files(fresh.paths.landing_dir("transactions"), gen, files, range(0, 1))
        t0 = time.monotonic()
        run_bronze(spark, fresh, "transactions")
        seconds = time.monotonic() - t0
        best["run_bronze (the whole ingestion)"] = min(
            best.get("run_bronze (the whole ingestion)", seconds), seconds
        )
        print(f"run_bronze: {seconds:.2f}s", flush=True)

    rows = [
        f"{lines:,} landed lines (transactions, one file), `local[2]`, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, Spark {spark.version}; fastest of {args.repeat}.",
        "",
        "| step | seconds | lines/s |",
        "|---|---:|---:|",
    ]
    for step, seconds in best.items():
        rows.append(f"| {step} | {seconds:.2f} | {lines / seconds:,.0f} |")
    table = "\n".join(rows)
    print(table)
    if args.results:
        Path(args.results).write_text(
            json.dumps(
                {
                    "command": "tools/benchmarks/ingestion_profile.py "
                    f"--events {args.events} --repeat {args.repeat}",
                    "lines": lines,
                    "seconds": best,
                },
                indent=1,
            )
            + "\n"
        )
    spark.stop()
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
