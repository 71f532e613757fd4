"""Benchmark side by side: the same queries on the same generated data, one run, four engines.

    make bench-compare                                   # 1,000,000 events per stream
    .venv/bin/python tools/benchmarks/compare.py --events 100000 --queries tumbling session

Engines (each query in a process of its own, so its wall time and peak memory are its own):

- ``tidemark``: as a user runs it, incrementally: the files are landed, then ingestion
  (landing -> bronze: parsing, validation, quarantine) and the job (bronze -> gold) run with
  ``availableNow``. Events/s counts both; the job alone is reported too.
- ``spark``: the same query as a bare hand-written PySpark Structured Streaming job reading the
  JSON files (dedup within the watermark, Spark's ``window``, ``session_window`` or interval
  join, RocksDB state, Parquet sink, ``availableNow``), so the platform's overhead is a ratio.
- ``flink``: Apache Flink through PyFlink's Table API (`compare_flink.py`): file source (the
  lines regrouped into one file per reader first, see there),
  parallelism 2, RocksDB, checkpoints every 10 s.
- ``tidemark@s3`` and ``spark@s3``: the same two with everything they read and write on the
  project's S3 server (SeaweedFS, started by the benchmark on 127.0.0.1): tidemark's data root
  ``s3://bench/...`` (landing, lake, checkpoints), bare Spark's input, checkpoint and sink as
  ``s3a://`` paths. The files are put on the store before the clock starts, as a producer
  would; so each ``@s3`` row against its local row is the store's cost.
- ``duckdb``: the batch answer (`compare_duckdb.py`), the floor for this machine and the
  reference every engine's answer is checked against, on the windows closed by the final
  watermark (`compare_queries.py`).

Flink and DuckDB run from the benchmark's own environment (``.tidemark/bench-venv``, made by
``make bench-compare`` from ``tools/benchmarks/compare-requirements.txt``), so their
dependencies never meet tidemark's pins. The data is generated without late or malformed
events (every engine must give the same answer), with the generator's 1 % duplicates.

Output: per query, each engine's events/s (input lines / processing seconds: from the start of
the engine's work to its end, JVM start excluded), its process's wall time, its peak memory
(proportional set size of the process and its children, sampled every 0.2 s), the ratio of tidemark's events/s
to each, and whether its answer equals DuckDB's. A markdown table is printed and the figures
go to ``--results`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHECKOUT = HERE.parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(CHECKOUT))

from compare_queries import COLUMNS, EVENT_TIME, QUERIES, Query  # noqa: E402

SPARK_TYPES = {"VARCHAR": "string", "DOUBLE": "double", "BIGINT": "long"}
TIME_COLUMNS = ("window_start", "window_end", "anchor")


# --- the engines that run in this environment (Spark) ---------------------------------------


def _epoch_ms(df):
    """Time columns as epoch milliseconds, so every engine's answer compares alike."""
    from pyspark.sql import functions as F

    for col in TIME_COLUMNS:
        if col in df.columns:
            df = df.withColumn(col, F.unix_millis(F.col(col)))
    return df


STORE_BUCKET = "bench"
ON_STORE = "@s3"


def _land(folder: Path, target) -> None:
    """Put every file under ``folder`` at the same name under ``target`` (a folder or a store
    location): what a producer does before the engine runs."""
    from streaming_jobs.core import locations
    from streaming_jobs.core.locations import Location

    target = Location.of(target)
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            locations.write_bytes(target / str(path.relative_to(folder)), path.read_bytes())


def run_tidemark(
    query: Query, folder: Path, out: Path, work: Path, store: str | None = None
) -> dict:
    from pyspark.sql import functions as F

    from streaming_jobs.core.config import TidemarkConfig
    from streaming_jobs.storage.lake import read_table
    from streaming_jobs.storage.registry import get_job
    from streaming_jobs.runtime.runner import run_bronze, run_job
    from streaming_jobs.storage.spark import get_spark
    from streaming_jobs.runtime.tables import ensure_lake

    root = store or work / "root"
    os.environ["TIDEMARK_DATA_ROOT"] = str(root)
    os.environ["TIDEMARK_WORK_DIR"] = str(work / "local")  # logs: this machine's
    cfg = TidemarkConfig.from_env().with_data_root(root)
    spark = get_spark(cfg)
    spec = get_job(query.job)
    if query.params:
        spec = replace(spec, name=f"bench_{query.name}", params={**spec.params, **query.params})
    ensure_lake(spark, cfg)  # once per lake, not per run: not timed
    for stream in query.streams:  # landing: what a producer does, not timed
        _land(folder / stream, cfg.paths.landing_dir(stream))
    started = time.monotonic()
    for stream in query.streams:
        run_bronze(spark, cfg, stream)
    ingested = time.monotonic()
    metrics = run_job(spark, cfg, spec)
    ended = time.monotonic()

    gold = read_table(spark, cfg.paths.table("gold", spec.name))
    if query.name == "sliding_60s":
        from sliding_window import expand_change_points

        watermark = (
            read_table(spark, cfg.paths.table("ops", "stream_progress"))
            .where(f"job = '{spec.name}'")
            .agg(F.max("watermark"))
            .collect()[0][0]
        )
        gold = expand_change_points(gold, 5, watermark)
    elif query.name == "interval_join":
        gold = gold.withColumn("anchor", F.coalesce("order_time", "payment_time"))
    _epoch_ms(gold).write.parquet(str(out))
    return {
        "processing_s": ended - started,
        "ingest_s": ingested - started,
        "job_s": ended - ingested,
        "job_input_rows": metrics.input_rows,
    }


def bare_session(on_store: bool = False):
    """A plain SparkSession with the settings a hand-written job would take from tidemark's:
    ``local[2]``, tidemark's shuffle partitions (its default: one per core, so 2), RocksDB state
    with changelog checkpoints, UTC. On the store, also the S3A jars tidemark resolved
    (hadoop-aws and the AWS SDK's parts) and the store's S3A settings, as a hand-written job on
    S3 needs them."""
    from pyspark.sql import SparkSession

    from streaming_jobs.core.config import TidemarkConfig

    provider = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    builder = SparkSession.builder
    cfg = TidemarkConfig.from_env()
    if on_store:
        from streaming_jobs.storage.spark import cached_jars, s3a_settings

        jars = cached_jars(cfg)
        if not jars:
            raise SystemExit("compare: the jars are not resolved yet; run `make setup`")
        builder = builder.config("spark.jars", ",".join(jars))
        for key, value in s3a_settings(cfg).items():
            builder = builder.config(f"spark.hadoop.{key}", value)
    return (
        builder.master("local[2]")
        .appName("bare-spark")
        .config("spark.driver.memory", "4g")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(cfg.spark.shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.stateStore.providerClass", provider)
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        .getOrCreate()
    )


def run_spark(query: Query, folder: Path, out: Path, work: Path, store: str | None = None) -> dict:
    """The query as a bare PySpark Structured Streaming job, written by hand."""
    from pyspark.sql import functions as F

    spark = bare_session(on_store=store is not None)
    spark.sparkContext.setLogLevel("ERROR")
    where = str(work)
    if store is not None:
        from streaming_jobs.core.locations import Location

        _land(folder, Location.of(store) / "input")  # not timed, as tidemark's landing
        where = Location.of(store).spark
        folder = f"{where}/input"

    def stream(name: str, reads: str = "true"):
        # as tidemark's jobs do: the watermark over every event, the dedup over those read
        schema = ", ".join(f"{k} {SPARK_TYPES[v]}" for k, v in COLUMNS[name].items())
        return (
            spark.readStream.schema(schema)
            .json(f"{folder}/{name}")
            .withColumn("ts", F.col(EVENT_TIME[name]).cast("timestamp"))
            .withWatermark("ts", "10 minutes")
            .where(reads)
            .dropDuplicatesWithinWatermark(["event_id"])
        )

    if query.name == "tumbling":
        rides = stream("rides")
        result = rides.groupBy("pickup_zone", F.window("ts", "1 hour").alias("w")).agg(
            F.count(F.lit(1)).alias("trips"),
            F.sum("total_amount").alias("revenue"),
            F.avg("fare").alias("avg_fare"),
        )
    elif query.name == "sliding_60s":
        failed = stream("transactions", "status = 'FAILED'")
        result = failed.groupBy(
            "user_id", F.window("ts", "60 seconds", "5 seconds").alias("w")
        ).agg(F.count(F.lit(1)).alias("failed_count"))
    elif query.name == "session":
        clicks = stream("clicks")
        result = clicks.groupBy("user_id", F.session_window("ts", "5 minutes").alias("w")).agg(
            F.count(F.lit(1)).alias("clicks"), F.sum("amount").alias("spend")
        )
    elif query.name == "interval_join":
        o = stream("orders").select(
            F.col("order_id").alias("o_id"),
            F.col("amount").alias("order_amount"),
            F.col("ts").alias("o_ts"),
        )
        p = stream("payments").select(
            F.col("order_id").alias("p_id"),
            "payment_id",
            F.col("amount").alias("payment_amount"),
            F.col("ts").alias("p_ts"),
        )
        joined = o.join(
            p,
            F.expr(
                "o_id = p_id and p_ts >= o_ts - interval 20 minutes "
                "and p_ts <= o_ts + interval 20 minutes"
            ),
            "full_outer",
        )
        result = joined.select(
            F.coalesce("o_id", "p_id").alias("order_id"),
            "payment_id",
            F.when(F.col("o_id").isNull(), "unknown_order")
            .when(F.col("payment_id").isNull(), "unpaid")
            .otherwise("paid")
            .alias("status"),
            "order_amount",
            "payment_amount",
            F.coalesce("o_ts", "p_ts").alias("anchor"),
        )
    else:
        raise SystemExit(
            f"compare: query {query.name} does not run on bare Spark: Spark's "
            "window() makes 17,280 copies of each event at 24 h / 5 s"
        )
    if "w" in result.columns:
        result = result.select(
            "*", F.col("w.start").alias("window_start"), F.col("w.end").alias("window_end")
        ).drop("w")
    raw = f"{where}/raw"
    started = time.monotonic()
    (
        result.writeStream.format("parquet")
        .outputMode("append")
        .option("checkpointLocation", f"{where}/checkpoint")
        .trigger(availableNow=True)
        .start(raw)
        .awaitTermination()
    )
    ended = time.monotonic()
    _epoch_ms(spark.read.parquet(raw)).write.parquet(f"file://{out}")
    return {"processing_s": ended - started}


# --- the parent: data, processes, memory, checks --------------------------------------------


def _children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                stat = (proc / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            out.setdefault(ppid, []).append(int(proc.name))
    return out


def tree_memory(pid: int) -> int:
    """Proportional set size (bytes) of ``pid`` and every process below it: pages shared
    between them (Spark's forked Python workers) are counted once, not once per process."""
    children, total, todo = _children(), 0, [pid]
    while todo:
        current = todo.pop()
        try:
            for line in Path(f"/proc/{current}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
                    break
        except (OSError, IndexError, ValueError):
            pass
        todo.extend(children.get(current, []))
    return total


def measured(command: list[str], log: Path) -> tuple[dict, float, int]:
    """Run ``command``; its last JSON line, its wall seconds and its peak memory (bytes, PSS)."""
    started = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=out, text=True)
        peak = [0]
        done = threading.Event()

        def sample():
            while True:
                peak[0] = max(peak[0], tree_memory(proc.pid))
                if done.wait(0.2):
                    return

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        stdout, _ = proc.communicate()
        done.set()
        sampler.join()
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(
            f"compare: {' '.join(command[:4])} failed (exit {proc.returncode}); see {log}"
        )
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]), wall, peak[0]


def generate_input(folder: Path, streams: set[str], events: int, files: int, seed: int) -> dict:
    from streaming_jobs.storage.generator import GeneratorConfig, generate, write_files

    lines = {}
    for stream in sorted(streams):
        gen = GeneratorConfig(
            stream=stream,
            events=events,
            files=files,
            seed=seed,
            late_share=0.0,
            malformed_share=0.0,
        )
        content = generate(gen)
        write_files(folder / stream, gen, content)
        shutil.rmtree(folder / f".{stream}.staging", ignore_errors=True)
        lines[stream] = sum(map(len, content))
    return lines


def versions(bench_python: str) -> dict:
    import pyspark

    flink = subprocess.run(
        [
            bench_python,
            "-c",
            "import importlib.metadata as m; print(m.version('apache-flink'), m.version('duckdb'))",
        ],
        capture_output=True,
        text=True,
    ).stdout.split()
    return {
        "python": platform.python_version(),
        "spark": pyspark.__version__,
        "flink": flink[0] if flink else "?",
        "duckdb": flink[1] if len(flink) > 1 else "?",
        "cores": os.cpu_count(),
    }


def table(results: list[dict], head: str) -> str:
    lines = [head, ""]
    for name in dict.fromkeys(r["query"] for r in results):
        rows = [r for r in results if r["query"] == name]

        def ours_for(row: dict) -> dict | None:  # tidemark where the row ran: disk or store
            place = ON_STORE if row["engine"].endswith(ON_STORE) else ""
            return next((r for r in rows if r["engine"] == f"tidemark{place}"), None)

        lines += [
            f"**{name}** ({QUERIES[name].job}; {rows[0]['input_events']:,} input events)",
            "",
            "| engine | events/s | processing s | wall s | peak memory MB | "
            "tidemark / engine (same place) | on disk / on the store | answer |",
            "|---|---:|---:|---:|---:|---:|---:|---|",
        ]
        for r in rows:
            ours = ours_for(r)
            ratio = (
                f"{ours['events_per_s'] / r['events_per_s']:.2f}" if ours and r is not ours else ""
            )
            check = r.get("check") or {}
            verdict = (
                "reference"
                if r["engine"] == "duckdb"
                else "equal"
                if check.get("equal")
                else f"differs: {check.get('missing')} missing, {check.get('extra')} extra, "
                f"{check.get('differing')} differing, {check.get('repeated')} repeated"
            )
            if r["engine"] != "duckdb" and check:
                verdict += f" ({check['compared']:,} rows)"
            disk = next(
                (d for d in rows if d["engine"] == r["engine"].removesuffix(ON_STORE)), None
            )
            store_cost = (
                f"{disk['events_per_s'] / r['events_per_s']:.2f}"
                if r["engine"].endswith(ON_STORE) and disk
                else ""
            )
            extra = f" (job alone {r['job_s']:.1f} s)" if "job_s" in r else ""
            lines.append(
                f"| {r['engine']} | {r['events_per_s']:,.0f} | "
                f"{r['processing_s']:.1f}{extra} | {r['wall_s']:.1f} | "
                f"{r['peak_memory_bytes'] / 2**20:,.0f} | {ratio} | {store_cost} | {verdict} |"
            )
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["engine"]:
        return engine_main(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="events per stream")
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--queries", nargs="+", default=list(QUERIES), choices=list(QUERIES))
    parser.add_argument("--engines", nargs="+", default=["duckdb", "tidemark", "spark", "flink"])
    parser.add_argument(
        "--bench-python", default=str(CHECKOUT / ".tidemark" / "bench-venv" / "bin" / "python")
    )
    parser.add_argument(
        "--results",
        default=None,
        help="where the JSON goes (default: the data root's results/; the committed evidence: results/compare.json)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the data and answers")
    args = parser.parse_args(argv)
    from streaming_jobs.core.config import default_results

    args.results = args.results or str(default_results("compare.json"))
    if not Path(args.bench_python).exists():
        raise SystemExit(
            f"compare: {args.bench_python} does not exist; `make bench-compare` "
            "creates the benchmark's environment (Flink, DuckDB)"
        )

    root = Path(tempfile.mkdtemp(prefix="tidemark-compare-"))
    folder = root / "input"
    streams = {s for q in args.queries for s in QUERIES[q].streams}
    store = _start_store() if any(e.endswith(ON_STORE) for e in args.engines) else None
    started = time.monotonic()
    lines = generate_input(folder, streams, args.events, args.files, args.seed)
    print(
        f"generated {sum(lines.values()):,} lines in {time.monotonic() - started:.0f}s: "
        + ", ".join(f"{s} {n:,}" for s, n in lines.items()),
        flush=True,
    )

    results = []
    for name in args.queries:
        query = QUERIES[name]
        events = sum(lines[s] for s in query.streams)
        reference = root / f"{name}.duckdb.parquet"
        for engine in ["duckdb", *[e for e in args.engines if e != "duckdb"]]:
            if engine.removesuffix(ON_STORE) not in query.engines:
                continue
            out, work = root / f"{name}.{engine}", root / f"work.{name}.{engine}"
            work.mkdir()
            if engine == "duckdb":
                command = [
                    args.bench_python,
                    str(HERE / "compare_duckdb.py"),
                    "answer",
                    "--query",
                    name,
                    "--input",
                    str(folder),
                    "--out",
                    str(reference),
                ]
            elif engine == "flink":
                command = [
                    args.bench_python,
                    str(HERE / "compare_flink.py"),
                    "--query",
                    name,
                    "--input",
                    str(folder),
                    "--out",
                    str(out),
                    "--work",
                    str(work),
                ]
            else:
                command = [
                    sys.executable,
                    str(HERE / "compare.py"),
                    "engine",
                    "--engine",
                    engine,
                    "--query",
                    name,
                    "--input",
                    str(folder),
                    "--out",
                    str(out),
                    "--work",
                    str(work),
                ]
                if engine.endswith(ON_STORE):
                    command = [
                        *command,
                        "--store",
                        f"{store}/{name}.{engine.removesuffix(ON_STORE)}",
                    ]
                    command[command.index("--engine") + 1] = engine.removesuffix(ON_STORE)
            said, wall, peak = measured(command, root / f"{name}.{engine}.log")
            row = {
                "query": name,
                "engine": engine,
                "input_events": events,
                "wall_s": wall,
                "peak_memory_bytes": peak,
                **said,
                "events_per_s": events / said["processing_s"],
            }
            if engine != "duckdb":
                row["check"], _, _ = measured(
                    [
                        args.bench_python,
                        str(HERE / "compare_duckdb.py"),
                        "check",
                        "--query",
                        name,
                        "--input",
                        str(folder),
                        "--reference",
                        str(reference),
                        "--answer",
                        str(out),
                    ],
                    root / f"{name}.{engine}.check.log",
                )
            results.append(row)
            print(
                f"{name} {engine}: {row['events_per_s']:,.0f} events/s, "
                f"{said['processing_s']:.1f}s, peak {peak / 2**20:,.0f} MB"
                + (
                    ""
                    if engine == "duckdb"
                    else f", answer {'equal' if row['check']['equal'] else row['check']}"
                ),
                flush=True,
            )
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)

    info = versions(args.bench_python)
    head = (
        f"{args.events:,} generated events per stream (seed {args.seed}, no late or "
        f"malformed events, 1 % duplicates), {info['cores']} cores, Python {info['python']}, "
        f"Spark {info['spark']}, Flink {info['flink']}, DuckDB {info['duckdb']}."
    )
    print(table(results, head))
    Path(args.results).write_text(
        json.dumps(
            {"events_per_stream": args.events, "versions": info, "results": results}, indent=1
        )
    )
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
        if store:
            from streaming_jobs.core import locations

            locations.delete_tree(locations.Location.of(store))
    else:
        print(f"kept {root}")
    return 0 if all(r.get("check", {"equal": True})["equal"] for r in results) else 1


def engine_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="compare.py engine")
    parser.add_argument("--engine", required=True, choices=("tidemark", "spark"))
    parser.add_argument("--query", required=True, choices=list(QUERIES))
    parser.add_argument("--input", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--work", required=True, type=Path)
    parser.add_argument("--store", help="s3://bucket/prefix: run there (an @s3 engine)")
    args = parser.parse_args(argv)
    run = run_tidemark if args.engine == "tidemark" else run_spark
    print(json.dumps(run(QUERIES[args.query], args.input, args.out, args.work, args.store)))
    return 0


def _start_store() -> str:
    """The project's S3 server (started for this run unless it runs; it stops with this
    process) and an empty bucket for the run: the ``s3://`` prefix the @s3 engines use."""
    import uuid

    from streaming_jobs.core.config import TidemarkConfig
    from streaming_jobs.core.stores import ensure_bucket
    from streaming_jobs.services import object_store

    cfg = TidemarkConfig.from_env()
    if cfg.s3.own_server:
        object_store.discover(cfg) or object_store.start(cfg)
    ensure_bucket(cfg, STORE_BUCKET)
    return f"s3://{STORE_BUCKET}/run-{uuid.uuid4().hex[:8]}"


if __name__ == "__main__":
    raise SystemExit(main())
