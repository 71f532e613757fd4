"""Benchmark: the whole reconciliation through dbt against the same SQL run plainly in Spark.

    make bench-recon                      # 10,000,000 bronze events, 4 waves
    .venv/bin/python tools/benchmarks/reconciliation.py --events 400000   # quick

It lands ``--events`` events (split evenly over the five demo streams) in waves, ingests each
wave into bronze and streams every registered job over it (as `tidemark run` does), so the gold
tables, checkpoints and progress rows are real. Then, in the same process and SparkSession
(a Hive metastore session, the one dbt-spark's session method uses):

1. ``dbt build``: every staging, batch, late-event and recon model, ``recon_summary`` and every
   test, through dbt's own runner (`orchestration.recon.dbt_cli`, as `make dbt ARGS=build` runs it);
2. ``plain Spark SQL``: the very SQL dbt compiled for those nodes (taken from the manifest
   the build wrote), run one statement after another with ``spark.sql``: views as
   ``CREATE OR REPLACE VIEW``, tables as ``CREATE OR REPLACE TABLE ... USING delta AS``, the
   incremental summary as ``INSERT INTO``, each test as a count of its failing rows.

Both get the same parallelism (dbt's profile threads, or ``--threads``); the plain run keeps
dbt's dependencies between models and nothing else. Each pair is run ``--repeat`` times and the
order alternates (dbt first, then plain first), because whoever runs first in the fresh JVM
pays its warm-up. Both must produce the same recon classes per job (checked). The ratio is
dbt's wall time over plain Spark SQL's. It prints a markdown table (paste it into
docs/benchmarks.md).
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

DEMO_STREAMS = ("transactions", "rides", "orders", "payments", "clicks")


def land_and_stream(
    spark, cfg, events: int, waves: int, seed: int, days: float = 0.0
) -> dict[str, float]:
    """Generate, land wave by wave, ingest and stream every job; returns seconds per phase.

    ``days``: spread every stream's events over that many days of event time (else the demo's
    rates: 2 events/s, clicks 0.5)."""
    from orchestration.cli.demo import DEMO_RATES
    from streaming_jobs.storage.generator import GeneratorConfig, generate_by_time, write_files
    from streaming_jobs.storage.registry import registry
    from streaming_jobs.runtime.runner import run_bronze, run_job

    pending = cfg.data_root / "pending"
    per_stream = events // len(DEMO_STREAMS)
    gens = []
    started = time.monotonic()
    for stream in DEMO_STREAMS:
        gen = GeneratorConfig(
            stream=stream,
            events=per_stream,
            files=waves,
            seed=seed,
            rate=per_stream / (days * 86_400) if days else DEMO_RATES.get(stream, 2.0),
        )
        # each wave the same span of event time in every stream (joined streams keep pace)
        span = per_stream / gen.rate / waves
        write_files(pending / stream, gen, generate_by_time(gen, span))  # one stream at a time
        gens.append(gen)
    times = {"generate": time.monotonic() - started, "ingest": 0.0, "stream": 0.0}
    from streaming_jobs.storage.generator import file_name

    for wave in range(waves):
        for gen in gens:
            landing = cfg.paths.landing_dir(gen.stream)
            landing.mkdir(parents=True, exist_ok=True)
            name = file_name(gen, wave)
            os.replace(pending / gen.stream / name, landing / name)
            t0 = time.monotonic()
            run_bronze(spark, cfg, gen.stream)
            times["ingest"] += time.monotonic() - t0
        t0 = time.monotonic()
        for spec in registry().values():
            run_job(spark, cfg, spec)
        times["stream"] += time.monotonic() - t0
        print(
            f"wave {wave + 1}/{waves}: ingest {times['ingest']:.0f}s, "
            f"stream {times['stream']:.0f}s",
            flush=True,
        )
    return times


def dbt_build(cfg, threads: int) -> tuple[float, float, int]:
    """One full `dbt build` (every day of every job) in this process: wall seconds, seconds in
    node SQL, nodes run. The incremental one: tools/benchmarks/incremental_recon.py."""
    from orchestration.recon.dbt_cli import main as dbt_main

    t0 = time.monotonic()
    code = dbt_main(["--full", "build", "--quiet", "--threads", str(threads)])
    wall = time.monotonic() - t0
    if code != 0:
        raise SystemExit(f"dbt build failed (exit {code}); see {cfg.paths.dbt / 'logs'}")
    results = json.loads((cfg.paths.dbt / "target" / "run_results.json").read_text())["results"]
    return wall, sum(r["execution_time"] for r in results), len(results)


def dbt_threads(cfg) -> int:
    """The thread count of dbt's profile: the plain run gets the same parallelism."""
    import yaml

    from orchestration.recon.project import run_project_dir

    profile = yaml.safe_load((run_project_dir(cfg) / "profiles.yml").read_text())["tidemark"]
    return int(profile["outputs"][profile["target"]]["threads"])


def compiled_nodes(cfg) -> list[dict]:
    """Every node dbt ran (in its order): kind, materialization, relation, SQL, dependencies."""
    target = cfg.paths.dbt / "target"
    manifest = json.loads((target / "manifest.json").read_text())["nodes"]
    order = [
        r["unique_id"] for r in json.loads((target / "run_results.json").read_text())["results"]
    ]
    ran = set(order)
    return [
        {
            "id": uid,
            "kind": manifest[uid]["resource_type"],
            "materialized": manifest[uid]["config"].get("materialized", ""),
            "relation": manifest[uid].get("relation_name") or "",
            "sql": manifest[uid]["compiled_code"],
            "needs": {d for d in manifest[uid]["depends_on"]["nodes"] if d in ran},
        }
        for uid in order
    ]


def _statement(spark, node) -> bool:
    """Run one node's SQL as dbt's materialization would; True if a test found failing rows."""
    sql, relation = node["sql"], node["relation"]
    if node["kind"] == "test":
        return spark.sql(f"select count(*) from ({sql}) as failures").collect()[0][0] > 0
    if node["materialized"] == "view":
        spark.sql(f"create or replace view {relation} as {sql}")
    elif node["materialized"] == "incremental":
        spark.sql(f"insert into {relation} {sql}")
    elif node["materialized"] == "recon_partitions":  # a full build: the whole table
        spark.sql(
            f"create or replace table {relation} using delta partitioned by (recon_date) as {sql}"
        )
    else:
        spark.sql(f"create or replace table {relation} using delta as {sql}")
    return False


def plain_sql(spark, nodes: list[dict], threads: int) -> tuple[float, int]:
    """The compiled SQL through spark.sql, ``threads`` statements at a time, dependencies first."""
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    t0 = time.monotonic()
    done: set[str] = set()
    waiting = list(nodes)
    running = {}
    failing = 0
    with ThreadPoolExecutor(max_workers=threads) as pool:
        while waiting or running:
            for node in [n for n in waiting if n["needs"] <= done][: threads - len(running)]:
                waiting.remove(node)
                running[pool.submit(_statement, spark, node)] = node["id"]
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                failing += future.result()
                done.add(running.pop(future))
    return time.monotonic() - t0, failing


def recon_classes(spark) -> dict[tuple[str, str], int]:
    from orchestration.recon.dbt_models import reconciled_jobs

    counts = {}
    for job in reconciled_jobs():
        for row in spark.sql(
            f"select recon_class, count(*) from recon.recon_{job} group by recon_class"
        ).collect():
            counts[(job, row[0])] = row[1]
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--waves", type=int, default=4)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=2, help="runs; the order alternates")
    parser.add_argument("--data-root", help="reuse a data root kept by an earlier --keep run")
    parser.add_argument("--keep", action="store_true", help="keep the data root")
    parser.add_argument(
        "--days",
        type=float,
        default=0.0,
        help="spread each stream over this many days of event time",
    )
    parser.add_argument(
        "--setup-only",
        action="store_true",
        help="land and stream, keep the data root, time nothing",
    )
    parser.add_argument(
        "--serial", action="store_true", help="also time the plain SQL on one thread"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="dbt's and the plain run's threads (default: dbt's profile)",
    )
    args = parser.parse_args(argv)

    reuse = bool(args.data_root)
    root = Path(args.data_root) if reuse else Path(tempfile.mkdtemp(prefix="tidemark-recon-"))
    os.environ["TIDEMARK_DATA_ROOT"] = str(root)
    from streaming_jobs.core.config import TidemarkConfig
    from streaming_jobs.storage.lake import read_table
    from streaming_jobs.storage.spark import get_spark

    cfg = TidemarkConfig.from_env().with_data_root(root)
    spark = get_spark(cfg, hive_metastore=True)  # dbt-spark's session method reuses it
    phases = (
        {} if reuse else land_and_stream(spark, cfg, args.events, args.waves, args.seed, args.days)
    )
    if args.setup_only:
        print(f"setup: {phases}; data root kept: {root}")
        spark.stop()
        return 0
    bronze = {s: read_table(spark, cfg.paths.table("bronze", s)).count() for s in DEMO_STREAMS}
    gold = {}
    from streaming_jobs.storage.registry import registry

    for name in registry():
        gold[name] = read_table(spark, cfg.paths.table("gold", name)).count()

    threads = args.threads or dbt_threads(cfg)
    runs = []
    for attempt in range(args.repeat):
        # Whoever runs first in a fresh JVM pays its warm-up (JIT, Spark's code generation
        # cache, Delta snapshots): the order alternates, and each run is reported.
        plain_first = attempt % 2 == 1
        if plain_first and args.repeat > 1:
            parallel_s, failing = plain_sql(spark, compiled_nodes(cfg), threads)
            plain_counts = recon_classes(spark)
        wall, in_sql, nodes = dbt_build(cfg, threads)
        dbt_counts = recon_classes(spark)
        if not (plain_first and args.repeat > 1):
            parallel_s, failing = plain_sql(spark, compiled_nodes(cfg), threads)
            plain_counts = recon_classes(spark)
        same = dbt_counts == plain_counts
        serial_s = plain_sql(spark, compiled_nodes(cfg), 1)[0] if args.serial else None
        order = "plain, then dbt" if plain_first and args.repeat > 1 else "dbt, then plain"
        runs.append((wall, nodes, parallel_s, serial_s, failing, same, order))
        print(
            f"run {attempt + 1} ({order}): dbt build {wall:.1f}s ({nodes} nodes, {in_sql:.1f}s "
            f"of node SQL over {threads} threads), plain Spark SQL {parallel_s:.1f}s, "
            f"same classes: {same}",
            flush=True,
        )

    compared = sum(dbt_counts.values())
    unexplained = sum(
        n
        for (_, c), n in dbt_counts.items()
        if c in ("value_mismatch", "missing_in_stream", "missing_in_batch")
    )
    lines = [
        f"{sum(bronze.values()):,} valid bronze rows "
        f"({', '.join(f'{s} {n:,}' for s, n in bronze.items())}), {len(gold)} jobs, "
        f"{sum(gold.values()):,} gold rows, {compared:,} recon rows ({unexplained} unexplained), "
        f"{runs[0][1]} dbt nodes (models and tests); `local[2]`, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, Spark {spark.version}."
        + (
            f" Setup: generate {phases['generate']:.0f}s, ingest {phases['ingest']:.0f}s, "
            f"stream {phases['stream']:.0f}s."
            if phases
            else ""
        ),
        "",
        "| run | order | dbt build (s) | plain Spark SQL (s) | ratio dbt / plain "
        "| plain Spark SQL, 1 thread (s) | same recon classes |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for i, (wall, _, parallel_s, serial_s, failing, same, order) in enumerate(runs, 1):
        serial = f"{serial_s:.1f}" if serial_s is not None else "-"
        lines.append(
            f"| {i} | {order} | {wall:.1f} | {parallel_s:.1f} | {wall / parallel_s:.2f} "
            f"| {serial} | {'yes' if same else 'NO'} |"
        )
    print("\n".join(lines))
    spark.stop()
    if not args.keep and not reuse:
        shutil.rmtree(root, ignore_errors=True)
    elif not reuse:
        print(f"data root kept: {root} (--data-root {root} to time the recon again)")
    return 0 if all(r[5] for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
