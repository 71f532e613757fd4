"""Benchmark: an incremental reconciliation after one more hour of events, against a full one.

    .venv/bin/python tools/benchmarks/reconciliation.py --events 10000000 --days 10 --setup-only
    .venv/bin/python tools/benchmarks/incremental_recon.py --data-root <the root it kept>

On a data root that ``reconciliation.py --setup-only --days D`` built (the five demo streams
spread over D days of event time, ingested and streamed by every job), as a schedule would:

1. ``tidemark-dbt --full build``: a full reconciliation (every day of every job), which also
   records where each job got to;
2. one more hour of events of every stream lands (the next hour of event time, late events
   and duplicates included), is ingested and streamed by every job;
3. ``tidemark-dbt build``: the incremental reconciliation (each job from the first day its
   new events can change; printed);
4. ``tidemark-dbt --full build`` again: the backfill of the same data. Every batch and recon
   table must hold the rows the incremental run left, and the summary the same classes.

Each dbt run is a new ``tidemark-dbt`` process. ``--target session`` (the default): dbt runs in
its own Spark (a JVM start included, as a scheduled run outside ``tidemark dev`` pays it).
``--target endpoint``: through the data root's SQL endpoint, started first and warmed by the
full run, as a scheduled run in ``tidemark dev`` or ``make live`` meets it. Prints a markdown
row for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import subprocess
import sys
import time
from pathlib import Path

DEMO_STREAMS = ("transactions", "rides", "orders", "payments", "clicks")
# Columns a row takes from the run that wrote it, not from the data (composed_through: the
# bronze version a composed batch row's run read up to, macros/compose.sql)
RUN_COLUMNS = ("reconciled_at", "stream_watermark", "composed_through")
# What a scheduled reconciliation runs (dbt's unit tests run in CI, not on every schedule).
BUILD = ("build", "--exclude-resource-type", "unit_test")


def tidemark_dbt(*args: str) -> tuple[float, str]:
    started = time.monotonic()
    done = subprocess.run(
        [str(Path(sys.executable).with_name("tidemark-dbt")), *args], capture_output=True, text=True
    )
    took = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"tidemark-dbt {' '.join(args)} failed:\n{done.stdout[-4000:]}")
    return took, done.stderr


COMPOSED = ("int_user_activity_profile__batch", "int_user_sessions__batch")


def slowest_nodes(cfg, count: int = 8) -> str:
    """The dbt nodes of the last invocation that took longest (its run_results.json)."""
    import json

    results = json.loads((cfg.paths.dbt / "target" / "run_results.json").read_text())["results"]
    top = sorted(results, key=lambda r: -r["execution_time"])[:count]
    total = sum(r["execution_time"] for r in results)
    # the composed models (macros/compose.sql), whose cost should follow the new events
    composed = {
        r["unique_id"].split(".")[-1]: r["execution_time"]
        for r in results
        if r["unique_id"].split(".")[-1] in COMPOSED
    }
    return (
        f"{len(results)} nodes, {total:.0f}s of node time; slowest: "
        + ", ".join(f"{r['unique_id'].split('.')[-1]} {r['execution_time']:.1f}s" for r in top)
        + "; composed: "
        + ", ".join(f"{k} {v:.1f}s" for k, v in sorted(composed.items()))
    )


def event_span(cfg) -> tuple[dt.datetime, dt.datetime, int]:
    """The earliest and latest event time over the demo streams' bronze, and the rows."""
    from deltalake import DeltaTable
    import pyarrow.compute as pc

    from streaming_jobs.storage.registry import stream_schema

    low = high = None
    rows = 0
    for stream in DEMO_STREAMS:
        column = stream_schema(stream).event_time
        times = DeltaTable(str(cfg.paths.table("bronze", stream))).to_pyarrow_table(
            columns=[column]
        )[column]
        rows += len(times)
        lo, hi = pc.min(times).as_py(), pc.max(times).as_py()
        low = lo if low is None or lo < low else low
        high = hi if high is None or hi > high else high
    return low, high, rows


def land_one_hour(spark, cfg, start: dt.datetime, rate: float, seed: int) -> int:
    from streaming_jobs.storage.generator import GeneratorConfig, generate_by_time, write_files
    from streaming_jobs.storage.registry import registry
    from streaming_jobs.runtime.runner import run_bronze, run_job

    events = int(rate * 3600)
    # event ids are the seed and a counter: a second run on the same root (its new hour starts
    # later) must not give other events the ids of the first run's hour
    seed += int(start.timestamp()) // 3600
    landed = 0
    for stream in DEMO_STREAMS:
        # named by its hour: a second run on the same root must not rewrite a file the stream
        # has already read (the file source skips a path it has seen, and nothing would land)
        gen = GeneratorConfig(
            stream=stream,
            events=events,
            files=1,
            seed=seed,
            rate=rate,
            start=start,
            file_prefix=f"next-hour-{start:%Y%m%dT%H%M%S}",
        )
        # the hour of event time, in every stream (payments are fewer than their orders)
        files = generate_by_time(gen, 3600.0)
        landed += sum(map(len, files))
        write_files(cfg.paths.landing_dir(stream), gen, files)
        if not run_bronze(spark, cfg, stream).input_rows:
            raise SystemExit(
                f"incremental_recon: bronze {stream} took no rows from the new "
                f"hour's file in {cfg.paths.landing_dir(stream)}; nothing to measure"
            )
    for spec in registry().values():
        run_job(spark, cfg, spec)
    return landed


def class_counts(cfg) -> dict[tuple[str, str], int]:
    from deltalake import DeltaTable

    from orchestration.recon.dbt_models import reconciled_jobs

    out: dict[tuple[str, str], int] = {}
    for job in reconciled_jobs():
        table = DeltaTable(str(cfg.paths.dbt_table("recon", f"recon_{job}")))
        for row in (
            table.to_pyarrow_table(columns=["recon_class"])
            .group_by("recon_class")
            .aggregate([("recon_class", "count")])
            .to_pylist()
        ):
            out[(job, row["recon_class"])] = row["recon_class_count"]
    return out


def table_digest(cfg, schema: str, name: str) -> tuple[int, int]:
    """Rows and an order-free hash of a dbt table's rows (built time left out). The row hashes
    are added, not XORed: two equal rows must not cancel out."""
    from deltalake import DeltaTable

    table = DeltaTable(str(cfg.paths.dbt_table(schema, name))).to_pyarrow_table()
    columns = [c for c in table.column_names if c not in RUN_COLUMNS]
    digest = 0
    for row in table.select(columns).to_pylist():
        digest = (digest + hash(tuple(sorted((k, repr(v)) for k, v in row.items())))) % 2**64
    return table.num_rows, digest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-root", required=True)
    parser.add_argument("--seed", type=int, default=101)
    parser.add_argument(
        "--target",
        choices=("session", "endpoint"),
        default="session",
        help="where dbt's SQL runs (see the module doc)",
    )
    args = parser.parse_args(argv)
    root = Path(args.data_root)
    os.environ["TIDEMARK_DATA_ROOT"] = str(root)
    os.environ["TIDEMARK_DBT_TARGET"] = args.target  # the tidemark-dbt processes inherit it
    from streaming_jobs.core.config import TidemarkConfig

    cfg = TidemarkConfig.from_env().with_data_root(root)
    if args.target == "endpoint":
        from orchestration.cli.services import start_sql_endpoint, stop_sql_endpoint

        start_sql_endpoint(cfg)
        try:
            return measure(cfg, args)
        finally:
            stop_sql_endpoint(cfg)
    return measure(cfg, args)


def measure(cfg, args) -> int:
    from streaming_jobs.storage.spark import get_spark

    low, high, rows = event_span(cfg)
    days = (high - low).total_seconds() / 86_400
    rate = rows / len(DEMO_STREAMS) / (high - low).total_seconds()
    print(
        f"{rows:,} bronze rows over {days:.1f} days of event time ({rate:.2f} events/s per stream)",
        flush=True,
    )

    full_s, _ = tidemark_dbt("--full", *BUILD)
    print(f"full reconciliation: {full_s:.1f}s\n  {slowest_nodes(cfg)}", flush=True)

    spark = get_spark(cfg)
    started = time.monotonic()
    added = land_one_hour(
        spark, cfg, high.replace(microsecond=0) + dt.timedelta(seconds=1), rate, args.seed
    )
    spark.stop()
    print(
        f"one more hour: {added:,} events landed and streamed in {time.monotonic() - started:.0f}s",
        flush=True,
    )

    incremental_s, scope = tidemark_dbt(*BUILD)
    scopes = [
        line.removeprefix("tidemark-dbt: ")
        for line in scope.splitlines()
        if line.startswith("tidemark-dbt: ")
    ]
    print(
        f"incremental reconciliation: {incremental_s:.1f}s\n  "
        + "\n  ".join(scopes)
        + f"\n  {slowest_nodes(cfg)}",
        flush=True,
    )
    tables = [
        (schema, name)
        for schema, name in [
            ("batch", p.name) for p in (cfg.paths.warehouse / "batch.db").iterdir()
        ]
        + [("recon", p.name) for p in (cfg.paths.warehouse / "recon.db").iterdir()]
        if name not in ("recon_summary", "recon_positions")
    ]
    after_incremental = {t: table_digest(cfg, *t) for t in tables}
    classes_incremental = class_counts(cfg)

    backfill_s, _ = tidemark_dbt("--full", *BUILD)
    same_rows = all(table_digest(cfg, *t) == after_incremental[t] for t in tables)
    same_classes = class_counts(cfg) == classes_incremental
    print(
        f"backfill: {backfill_s:.1f}s; same rows in {len(tables)} tables: {same_rows}; "
        f"same classes: {same_classes}"
    )
    print(
        "\n| dbt target | history (days) | bronze rows | full (s) | +1 hour incremental (s) "
        "| incremental / full | backfill (s) | same rows and classes as the backfill |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    print(
        f"| {args.target} | {days:.1f} | {rows:,} | {full_s:.1f} | {incremental_s:.1f} "
        f"| {incremental_s / full_s:.1%} | {backfill_s:.1f} "
        f"| {'yes' if same_rows and same_classes else 'NO'} |"
    )
    return 0 if same_rows and same_classes else 1


if __name__ == "__main__":
    raise SystemExit(main())
