"""Benchmark: how full and incremental reconciliation grow with the length of history.

    make bench-recon-history                # 10,000,000 events over 10 days, 4 steps
    .venv/bin/python tools/benchmarks/recon_history.py --events 10000000 --days 10 --steps 4

One rate for every row: the five demo streams' events (``--events`` in all) spread evenly over
``--days`` days of event time, generated once into hourly files (file k: the k-th hour of event
time of every stream, so the joined streams keep pace). The history then grows step by
step (2.5, 5, 7.5 and 10 days with the defaults). At each step, as a schedule would meet it:

1. the step's hours but the last land, are ingested and streamed by every job (as
   `tidemark run` does);
2. ``tidemark-dbt --full build``: the full reconciliation of everything so far (timed), which
   also records where each job got to;
3. the step's last hour lands, is ingested and streamed;
4. ``tidemark-dbt build``: the incremental reconciliation of that hour (timed; each job's scope
   printed);
5. at the last step (every step with ``--check-every``): ``tidemark-dbt --full build`` again,
   the backfill, and every batch and recon table must hold the rows the incremental run left,
   and the same recon classes.

Each dbt run is a new process on the session target (a JVM start included, as a scheduled run
outside `tidemark dev` pays it), without dbt's unit tests (a scheduled run leaves them out).

``--endpoint``: as `tidemark dev` and `make live` run it. The data root's SQL endpoint (a warm
Spark that stays up, `streaming_jobs.services.sql_endpoint`) runs the full and incremental builds; the
last step keeps back two hours, not one: the first is reconciled through the endpoint, then the
endpoint stops and the second is reconciled on the session target, for the same hour of history
both ways. The backfill runs on the session target.
Prints a markdown table for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from incremental_recon import (
    BUILD,
    DEMO_STREAMS,
    class_counts,
    slowest_nodes,
    table_digest,
    tidemark_dbt,
)


def land_hours(spark, cfg, gens, pending: Path, hours: range) -> tuple[float, float]:
    """Move those hourly files of every stream into landing, ingest and stream every job."""
    from streaming_jobs.storage.generator import file_name
    from streaming_jobs.storage.registry import registry
    from streaming_jobs.runtime.runner import run_bronze, run_job

    t0 = time.monotonic()
    for gen in gens:
        landing = cfg.paths.landing_dir(gen.stream)
        landing.mkdir(parents=True, exist_ok=True)
        for hour in hours:
            name = file_name(gen, hour)
            os.replace(pending / gen.stream / name, landing / name)
        run_bronze(spark, cfg, gen.stream)
    t1 = time.monotonic()
    for spec in registry().values():
        run_job(spark, cfg, spec)
    return t1 - t0, time.monotonic() - t1


def recon_tables(cfg) -> list[tuple[str, str]]:
    return [
        (schema, p.name)
        for schema in ("batch", "recon")
        for p in sorted((cfg.paths.warehouse / f"{schema}.db").iterdir())
        if p.name not in ("recon_summary", "recon_positions")
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--days", type=float, default=10.0)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--check-every",
        action="store_true",
        help="compare with a backfill at every step, not only the last",
    )
    parser.add_argument("--keep", action="store_true", help="keep the data root")
    parser.add_argument(
        "--endpoint",
        action="store_true",
        help="reconcile through the data root's SQL endpoint (module docstring)",
    )
    args = parser.parse_args(argv)
    hours = round(args.days * 24)
    if hours % args.steps:
        parser.error(f"--days {args.days} ({hours} hours) must split into --steps {args.steps}")

    root = Path(tempfile.mkdtemp(prefix="tidemark-history-"))
    os.environ["TIDEMARK_DATA_ROOT"] = str(root)
    if args.endpoint:
        from streaming_jobs.services.processes import free_port

        os.environ["TIDEMARK_SQL_PORT"] = str(free_port())
    from streaming_jobs.core.config import TidemarkConfig
    from streaming_jobs.storage.generator import GeneratorConfig, generate_by_time, write_files
    from streaming_jobs.storage.spark import get_spark

    cfg = TidemarkConfig.from_env().with_data_root(root)
    pending = root / "pending"
    per_stream = args.events // len(DEMO_STREAMS)
    rate = per_stream / (args.days * 86_400)
    started = time.monotonic()
    gens, lines = [], 0
    for stream in DEMO_STREAMS:
        gen = GeneratorConfig(
            stream=stream, events=per_stream, files=hours, seed=args.seed, rate=rate
        )
        # file k holds the k-th hour of event time of every stream: split by count, the
        # payments (fewer than their orders) would run ahead of the orders further every file,
        # and the join's state would hold the whole gap (its watermark follows the slower side)
        files = generate_by_time(gen, 3600.0)
        lines += sum(map(len, files))
        write_files(pending / stream, gen, files)  # one stream in memory at a time
        gens.append(gen)
    print(
        f"generated {lines:,} lines in {hours} hourly files per stream ({rate:.2f} events/s "
        f"per stream) in {time.monotonic() - started:.0f}s",
        flush=True,
    )

    rows = []
    per_step = hours // args.steps
    for step in range(1, args.steps + 1):
        first, last = (step - 1) * per_step, step * per_step - 1
        # the last step of --endpoint keeps back one more hour, for the session target
        session_hour = last if args.endpoint and step == args.steps else None
        last -= session_hour is not None
        on_target(cfg, "endpoint" if args.endpoint else "session")
        spark = get_spark(cfg)
        ingest_s, stream_s = land_hours(spark, cfg, gens, pending, range(first, last))
        spark.stop()
        print(
            f"step {step}: hours {first}-{last - 1} ingested in {ingest_s:.0f}s, streamed in "
            f"{stream_s:.0f}s",
            flush=True,
        )
        full_s, _ = tidemark_dbt("--full", *BUILD)
        print(f"  full reconciliation: {full_s:.1f}s\n  {slowest_nodes(cfg)}", flush=True)
        spark = get_spark(cfg)
        ingest_s, stream_s = land_hours(spark, cfg, gens, pending, range(last, last + 1))
        spark.stop()
        incremental_s, said = tidemark_dbt(*BUILD)
        scopes = [
            line.removeprefix("tidemark-dbt: ")
            for line in said.splitlines()
            if line.startswith("tidemark-dbt: ")
        ]
        print(
            f"  hour {last}: ingested in {ingest_s:.0f}s, streamed in {stream_s:.0f}s; "
            f"incremental reconciliation: {incremental_s:.1f}s\n    "
            + "\n    ".join(scopes)
            + f"\n  {slowest_nodes(cfg)}",
            flush=True,
        )
        session_s = None
        if session_hour is not None:
            on_target(cfg, "session")
            spark = get_spark(cfg)
            land_hours(spark, cfg, gens, pending, range(session_hour, session_hour + 1))
            spark.stop()
            session_s, _ = tidemark_dbt(*BUILD)
            print(
                f"  hour {session_hour} on the session target (the endpoint stopped): "
                f"incremental reconciliation: {session_s:.1f}s\n  {slowest_nodes(cfg)}",
                flush=True,
            )
        on_target(cfg, "session")
        checked = None
        if step == args.steps or args.check_every:
            tables = recon_tables(cfg)
            after_incremental = {t: table_digest(cfg, *t) for t in tables}
            classes = class_counts(cfg)
            backfill_s, _ = tidemark_dbt("--full", *BUILD)
            differ = [".".join(t) for t in tables if table_digest(cfg, *t) != after_incremental[t]]
            after_backfill = class_counts(cfg)
            differ += [
                f"{job} {cls}: {classes.get((job, cls))} incremental, "
                f"{after_backfill.get((job, cls))} backfill"
                for job, cls in sorted(set(classes) | set(after_backfill))
                if classes.get((job, cls)) != after_backfill.get((job, cls))
            ]
            checked = (not differ, len(tables), backfill_s)
            print(
                f"  backfill: {backfill_s:.1f}s; same rows and classes in {len(tables)} "
                f"tables: {checked[0]}" + "".join(f"\n    differs: {d}" for d in differ),
                flush=True,
            )
        bronze = bronze_rows(cfg)
        rows.append(((last + 1) / 24, bronze, full_s, incremental_s, session_s, checked))

    target = "the SQL endpoint" if args.endpoint else "the session target"
    print(
        f"\n| history (days) | bronze rows | full (s), {target} | +1 hour incremental (s), "
        f"{target} | incremental / full | same rows and classes as a backfill |"
        + (" +1 hour more, session target (s) |" if args.endpoint else "")
    )
    print("|---:|---:|---:|---:|---:|---|" + ("---:|" if args.endpoint else ""))
    for days, bronze, full_s, incremental_s, session_s, checked in rows:
        same = (
            "-"
            if checked is None
            else f"{'yes' if checked[0] else 'NO'}, {checked[1]} tables "
            f"(backfill {checked[2]:.1f} s)"
        )
        print(
            f"| {days:.3g} | {bronze:,} | {full_s:.1f} | {incremental_s:.1f} "
            f"| {incremental_s / full_s:.0%} | {same} |"
            + (f" {'-' if session_s is None else f'{session_s:.1f}'} |" if args.endpoint else "")
        )
    if args.keep:
        print(f"data root kept: {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if all(c is None or c[0] for *_, c in rows) else 1


def on_target(cfg, target: str) -> None:
    """tidemark-dbt's runs from now on go to ``target``: the endpoint is started (and left up)
    or stopped."""
    from orchestration.cli.services import start_sql_endpoint, stop_sql_endpoint

    os.environ["TIDEMARK_DBT_TARGET"] = target
    if target == "endpoint":
        start_sql_endpoint(cfg)
    else:
        stop_sql_endpoint(cfg)


def bronze_rows(cfg) -> int:
    from deltalake import DeltaTable

    return sum(DeltaTable(str(cfg.paths.table("bronze", s))).count() for s in DEMO_STREAMS)


if __name__ == "__main__":
    raise SystemExit(main())
