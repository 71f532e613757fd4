"""``tidemark``: set up, run the main job, print the summary.

    tidemark setup             resolve and cache the jars, prepare the Dagster home, parse dbt
    tidemark run               the main job on the embedded default (see `run`)
    tidemark summary           rows per table and the latest reconciliation, for the data root
    tidemark recon             the latest reconciliation report of every job (exit 1 if unexplained)
    tidemark dev               the SQL endpoint and the Dagster UI + daemon on 127.0.0.1:3000
    tidemark live              the always-on setup for a bounded time, then the summary
    tidemark sql start|stop|status   the SQL endpoint dbt uses (Spark's Thrift server)
    tidemark continuous        run jobs continuously until Ctrl-C (a clean stop)
    tidemark health            checkpoint findings of every job (exit 1 if any is critical)
    tidemark state JOB         a job's state per operator, and its largest keys
    tidemark alerts            recent alerts; --deliver sends the pending ones
    tidemark savepoint JOB     take a savepoint (--all: every job)
    tidemark restore JOB       put the latest (or --savepoint NAME) back
    tidemark rescale JOB N     repartition a stopped job's state into N partitions
    tidemark generate ...      write landing files (python -m streaming_jobs.generator --help)
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time

from streaming_jobs.config import ConfigError, TidemarkConfig
from streaming_jobs.generator import GeneratorConfig, generate, write_files
from streaming_jobs.spark import SparkStartupError, get_spark
from streaming_jobs.sql_endpoint import EndpointError

from orchestration.instance import prepare_dagster_home
from orchestration.operate import OPERATIONS, OperationError
from orchestration.services import ServiceError

DEMO_MARKER = ".tidemark-demo"
# The streams the registered jobs read; the main job generates a sample of each.
DEMO_STREAMS = ("transactions", "rides", "orders", "payments", "clicks")
# Clicks arrive slower, so users go idle and sessions end within the sample's span.
DEMO_RATES = {"clicks": 0.5}
# What `run --fresh` clears: everything a run produced except the Dagster run history.
RUN_STATE = ("landing", "lake", "checkpoints", "savepoints", "dbt")
# Folders that hold real data: never cleared unless the demo created them.
DATA_BEARING = ("landing", "lake", "checkpoints", "savepoints")


def setup(cfg: TidemarkConfig) -> None:
    from streaming_jobs import ops_tables

    from orchestration.project import ensure_manifest

    started = time.monotonic()
    get_spark(cfg)  # first start resolves the jars into the cache and records them
    ops_tables.ensure_all(cfg)  # created once, up front: writers only ever append
    prepare_dagster_home(cfg)
    ensure_manifest(cfg)
    print(f"setup done in {time.monotonic() - started:.0f}s: jars cached in "
          f"{cfg.spark.jars_cache}, Dagster home {cfg.paths.dagster_home}")


def _has_data(root) -> bool:
    return any((root / name).is_dir() and any((root / name).iterdir()) for name in DATA_BEARING)


def _reset(cfg: TidemarkConfig) -> None:
    root = cfg.data_root
    marker = root / DEMO_MARKER
    if _has_data(root) and not marker.exists():
        raise SystemExit(
            f"tidemark run --fresh: {root} holds data that tidemark run did not create; "
            "refusing to clear it. Point TIDEMARK_DATA_ROOT at an empty folder, or run without --fresh."
        )
    for name in RUN_STATE:
        shutil.rmtree(root / name, ignore_errors=True)
    root.mkdir(parents=True, exist_ok=True)
    marker.write_text("created by `tidemark run`; `tidemark run --fresh` may clear this folder\n")


def run(cfg: TidemarkConfig, events: int, waves: int, seed: int, fresh: bool) -> int:
    """Generate a sample in waves, stream each wave through Dagster, then the whole graph.

    Each wave lands files and materializes the streaming assets, as a stream would see data
    arrive over time (so watermarks advance and late events are really dropped). Then the whole
    asset graph, reconciliation included, is materialized in one Dagster run.
    """
    started = time.monotonic()
    if fresh:
        _reset(cfg)  # before importing definitions: building them parses dbt into the data root
    from dagster import DagsterInstance

    from orchestration.definitions import build_definitions
    from orchestration.summary import collect, render

    prepare_dagster_home(cfg)
    defs = build_definitions(cfg)
    instance = DagsterInstance.get()
    samples = [(gen, generate(gen)) for gen in (
        GeneratorConfig(stream=stream, events=events, files=waves, seed=seed,
                        rate=DEMO_RATES.get(stream, 2.0))
        for stream in DEMO_STREAMS)]
    ok = True
    for wave in range(waves):
        landed = 0
        for gen, files in samples:
            write_files(cfg.paths.landing_dir(gen.stream), gen, files, range(wave, wave + 1))
            landed += len(files[wave])
        result = defs.resolve_job_def("streaming_job").execute_in_process(
            instance=instance, raise_on_error=False, tags={"tidemark/wave": str(wave + 1)})
        print(f"wave {wave + 1}/{waves}: {landed:,} lines landed, streaming run "
              f"{result.run_id[:8]} {'succeeded' if result.success else 'FAILED'}", flush=True)
        ok &= result.success
    result = defs.resolve_job_def("tidemark_all_job").execute_in_process(
        instance=instance, raise_on_error=False)
    print(f"whole graph: run {result.run_id[:8]} {'succeeded' if result.success else 'FAILED'}",
          flush=True)
    ok &= result.success
    summary = collect(get_spark(cfg), cfg)
    print(f"main job took {time.monotonic() - started:.0f}s")
    print(render(summary, cfg))
    return 0 if ok and summary.unexplained == 0 and summary.recon else 1


def dev(cfg: TidemarkConfig, port: int) -> int:
    """The SQL endpoint, then `dagster dev` (webserver + daemon) on loopback, until Ctrl-C."""
    from orchestration.live import DagsterDev
    from orchestration.services import start_sql_endpoint, stop_sql_endpoint

    prepare_dagster_home(cfg)
    endpoint = start_sql_endpoint(cfg)
    print(f"SQL endpoint: 127.0.0.1:{endpoint.port} (log {cfg.paths.logs / 'sql_endpoint.log'})",
          flush=True)
    dagster = DagsterDev(cfg, port)
    try:
        dagster.start()
        print(f"Dagster UI: http://127.0.0.1:{port} (daemon running; log "
              f"{dagster.log_path}); Ctrl-C to stop", flush=True)
        dagster.wait()
    except KeyboardInterrupt:
        print("stopping...", flush=True)
    finally:
        dagster.stop()
        stop_sql_endpoint(cfg)
    return 0


def sql(cfg: TidemarkConfig, action: str) -> int:
    from streaming_jobs.sql_endpoint import discover

    from orchestration.services import start_sql_endpoint, stop_sql_endpoint

    if action == "start":
        found = start_sql_endpoint(cfg, owned=False)
        print(f"SQL endpoint on 127.0.0.1:{found.port} (pid {found.pid}); log "
              f"{cfg.paths.logs / 'sql_endpoint.log'}")
    elif action == "stop":
        print("SQL endpoint stopped" if stop_sql_endpoint(cfg) else "no SQL endpoint was running")
    else:
        found = discover(cfg)
        print(f"SQL endpoint on 127.0.0.1:{found.port} (pid {found.pid})" if found
              else f"no SQL endpoint runs for {cfg.data_root}")
        return 0 if found else 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tidemark", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("setup", help="resolve jars, prepare Dagster home, parse dbt")
    run_p = sub.add_parser("run", help="the main job on the embedded default")
    run_p.add_argument("--events", type=int, default=24_000)
    run_p.add_argument("--waves", type=int, default=4)
    run_p.add_argument("--seed", type=int, default=7)
    run_p.add_argument("--fresh", action="store_true",
                       help="clear the data root's run state first (keeps Dagster history)")
    sub.add_parser("summary", help="rows per table and the latest reconciliation")
    sub.add_parser("recon", help="the latest reconciliation report of every job")
    dev_p = sub.add_parser("dev", help="the SQL endpoint, Dagster UI and daemon on 127.0.0.1")
    dev_p.add_argument("--port", type=int, default=3000)
    live_p = sub.add_parser("live", help="the always-on setup for a bounded time, then the summary")
    live_p.add_argument("--minutes", type=float, default=5.0, help="how long it runs (default 5)")
    live_p.add_argument("--rate", type=float, default=40.0,
                        help="events landed per second per stream (default 40)")
    live_p.add_argument("--port", type=int, default=3000)
    live_p.add_argument("--recon-every", type=int, default=2,
                        help="minutes between scheduled reconciliations (default 2)")
    live_p.add_argument("--fresh", action="store_true", help="clear the data root's run state first")
    sql_p = sub.add_parser("sql", help="the SQL endpoint dbt uses (Spark's Thrift server)")
    sql_p.add_argument("action", choices=("start", "stop", "status"))
    cont = sub.add_parser("continuous", help="run jobs continuously until Ctrl-C")
    cont.add_argument("--jobs", default="", help="comma-separated (default: every job)")
    cont.add_argument("--trigger", type=float, default=10.0, help="trigger interval, seconds")
    cont.add_argument("--max-seconds", type=float, default=None)
    sub.add_parser("health", help="checkpoint findings of every job")
    state_p = sub.add_parser("state", help="a job's state per operator and its largest keys")
    state_p.add_argument("job")
    state_p.add_argument("--top", type=int, default=5)
    alerts_p = sub.add_parser("alerts", help="recent alerts")
    alerts_p.add_argument("--deliver", action="store_true", help="send the pending ones now")
    save_p = sub.add_parser("savepoint", help="take a savepoint of a job (between batches)")
    save_p.add_argument("job", nargs="?")
    save_p.add_argument("--all", action="store_true")
    restore_p = sub.add_parser("restore", help="restore a job's savepoint")
    restore_p.add_argument("job")
    restore_p.add_argument("--savepoint", help="its folder name (default: the latest)")
    rescale_p = sub.add_parser("rescale", help="repartition a stopped job's state")
    rescale_p.add_argument("job")
    rescale_p.add_argument("partitions", type=int)
    sub.add_parser("generate", help="write landing files", add_help=False)
    args, rest = parser.parse_known_args(argv)
    try:
        cfg = TidemarkConfig.from_env()
        if args.command == "setup":
            setup(cfg)
            return 0
        if args.command == "run":
            return run(cfg, args.events, args.waves, args.seed, args.fresh)
        if args.command == "summary":
            from orchestration.summary import collect, render

            print(render(collect(get_spark(cfg), cfg), cfg))
            return 0
        if args.command == "recon":
            from orchestration.summary import collect_recon, recon_lines

            summary = collect_recon(get_spark(cfg), cfg)
            print("\n".join([f"tidemark reconciliation (data root {cfg.data_root})",
                             *recon_lines(summary)]))
            return 1 if summary.unexplained else 0
        if args.command == "dev":
            return dev(cfg, args.port)
        if args.command == "sql":
            return sql(cfg, args.action)
        if args.command == "live":
            from orchestration.live import live

            if args.fresh:
                _reset(cfg)
            return live(cfg, minutes=args.minutes, rate=args.rate, port=args.port,
                        recon_every_minutes=args.recon_every)
        if args.command in OPERATIONS:
            from orchestration import operate

            return getattr(operate, args.command)(cfg, args)
        from streaming_jobs.generator import main as generator_main

        return generator_main(rest)
    except (ConfigError, SparkStartupError, OperationError, ServiceError, EndpointError) as exc:
        print(f"tidemark: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
