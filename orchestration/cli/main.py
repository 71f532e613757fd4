"""``tidemark``: set up, run the main job, print the summary.

tidemark setup             resolve and cache the jars, prepare the Dagster home, parse dbt
tidemark run               the main job on the embedded default (see `run`)
tidemark summary           rows per table and the latest reconciliation, for the data root
tidemark recon             the latest reconciliation report of every job (exit 1 if unexplained)
tidemark dev               the SQL endpoint and the Dagster UI + daemon on 127.0.0.1:3000
tidemark live              the always-on setup for a bounded time, then the summary
tidemark sql start|stop|status   the SQL endpoint dbt uses (Spark's Thrift server)
tidemark kafka start|stop|status the project's own Kafka broker (KRaft, 127.0.0.1)
tidemark s3 install|start|stop|status  the project's own S3-compatible store (SeaweedFS)
tidemark cluster start|stop|status the project's own Spark cluster (master + workers)
tidemark continuous        run jobs continuously until Ctrl-C (a clean stop)
tidemark health            checkpoint findings of every job (exit 1 if any is critical)
tidemark state JOB         a job's state per operator, and its largest keys
tidemark alerts            recent alerts; --deliver sends the pending ones
tidemark savepoint JOB     take a savepoint (--all: every job)
tidemark restore JOB       put the latest (or --savepoint NAME) back
tidemark rescale JOB N     Spark's offline state repartitioning (4.2.0 rewrites nothing:
                           it says so; 'rebuild JOB --partitions N' does it)
tidemark check             analyse every job against its sources without running it
tidemark new stream|job NAME   write a commented file that loads as is (job: --source S)
tidemark materialize --select SEL   run a selection of assets (e.g. '+key:gold/my_job')
                           [--partition DAY|FROM:TO] reconciliation's days to recompute
tidemark rebuild JOB       run the job's code over bronze beside the live version, reconcile
                           it, then swap; [--partitions N] its state's partitions;
                           [--skip-recon] without reconciling; [--from-scratch] reset
tidemark rollback JOB      put back the version the last swap replaced
tidemark code JOB          the job's file against its checkpoint's version (a diff);
                           [--put-back] write that version's file back
tidemark repair QUERY      set aside a checkpoint's torn newest file (bronze_S or a job), when safe
tidemark maintain          retention now: compaction, VACUUM, ops pruning, landing archive
tidemark generate ...      write landing files (python -m streaming_jobs.storage.generator --help)
tidemark settings          every TIDEMARK_* setting with its default (--write: into the docs)
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable

from streaming_jobs.core.checkpoints import CheckpointBusy
from streaming_jobs.core.config import ConfigError, TidemarkConfig
from streaming_jobs.storage.generator import GeneratorConfig, deliver, generate
from streaming_jobs.storage.spark import SparkStartupError, build_class_archive, get_spark
from streaming_jobs.runtime.runner import StreamRunError
from streaming_jobs.runtime.changes import UnsafeChange
from streaming_jobs.storage.kafka import KafkaSourceError
from streaming_jobs.services.lifecycle import ServiceError
from streaming_jobs.core.stores import StoreError

from orchestration.cli.demo import DEMO_RATES, DEMO_STREAMS, reset_demo_root
from orchestration.lib.instance import prepare_dagster_home
from orchestration.cli.operate import OPERATIONS, OperationError
from orchestration.recon.recon_partitions import incremental_tags
from orchestration.cli.services import (
    start_cluster_if_used,
    start_kafka_if_used,
    start_store_if_used,
)


def setup(cfg: TidemarkConfig) -> None:
    from streaming_jobs.storage import ops_tables
    from orchestration.recon.dbt_models import ensure_manifest
    from orchestration.cli.terminal import Console

    with Console(cfg, "setup") as console:
        get_spark(cfg)  # first start resolves the jars into the cache and records them
        # every later JVM start maps these classes; its JVM (about a minute) runs beside the rest
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="class-archive") as pool:
            building = pool.submit(build_class_archive, cfg)
            ops_tables.ensure_all(cfg)  # created once, up front: writers only ever append
            prepare_dagster_home(cfg)
            ensure_manifest(cfg)
            archive = building.result()
        classes = (
            f"JVM class archive {archive.name}"
            if archive
            else "no JVM class archive (see driver-classes.log there)"
        )
        console.line(
            f"setup done in {console.elapsed().strip()}: jars cached in "
            f"{cfg.spark.jars_cache}, {classes}, Dagster home {cfg.paths.dagster_home} "
            f"(log {console.log_path})"
        )


def _materialized(result) -> dict[str, dict]:
    """Per asset a run materialized: its numeric metadata (the labels of the other days a
    reconciliation rewrote carry none)."""
    from orchestration.recon.recon_partitions import DAY_LABEL

    out = {}
    for event in result.get_asset_materialization_events():
        materialization = event.event_specific_data.materialization
        if DAY_LABEL in materialization.metadata:
            continue
        out[materialization.asset_key.to_user_string()] = {
            k: v.value
            for k, v in materialization.metadata.items()
            if isinstance(v.value, (int, float))
        }
    return out


# The commands that leave the data root alone: the others, with the data root on the project's
# own S3 server, start it for as long as they run unless it runs (`start_store_if_used`)
STORELESS_COMMANDS = ("s3", "settings", "new", "check", "kafka", "cluster")


def run(cfg: TidemarkConfig, events: int, waves: int, seed: int, fresh: bool) -> int:
    """Generate a sample in waves, stream each wave through Dagster, then the whole graph.

    Each wave lands files and materializes the streaming assets, as a stream would see data
    arrive over time (so watermarks advance and late events are really dropped). Then the whole
    asset graph, reconciliation included, is materialized in one Dagster run. The terminal gets
    a line per phase; everything else (Dagster's events, Spark, dbt) goes to a log file.
    """
    import os

    from orchestration.cli.terminal import Console

    store = start_store_if_used(cfg)  # before --fresh clears what is on it
    if fresh:
        from streaming_jobs.services import kafka_broker

        kafka_broker.stop(cfg)  # its topics live in the data root that is cleared
        reset_demo_root(cfg)  # before building definitions: they parse dbt into the data root
    with Console(cfg, "run") as console:
        console.line(
            f"tidemark run: {events:,} events of each of {len(DEMO_STREAMS)} streams in "
            f"{waves} waves, data root {cfg.data_root}"
        )
        console.line(f"  full log: {console.log_path}")
        if store:
            console.line(f"  data: {store}")
        spark_on = start_cluster_if_used(cfg)
        if spark_on:
            console.line(f"  Spark: {spark_on}")
        broker = start_kafka_if_used(cfg)
        if broker:
            console.line(f"  source: Kafka, {broker}")
        from dagster import DagsterInstance

        from orchestration.definitions import build_definitions
        from orchestration.cli.summary import collect, render

        prepare_dagster_home(cfg)
        os.environ["TIDEMARK_DATA_ROOT"] = str(cfg.data_root)  # the definitions' data root
        defs = build_definitions()
        instance = DagsterInstance.get()
        samples = [
            (gen, generate(gen))
            for gen in (
                GeneratorConfig(
                    stream=stream,
                    events=events,
                    files=waves,
                    seed=seed,
                    rate=DEMO_RATES.get(stream, 2.0),
                )
                for stream in DEMO_STREAMS
            )
        ]
        console.line(f"{console.elapsed()}  definitions loaded, {len(samples)} samples generated")
        failures: list[str] = []  # why the command exits 1, said last
        for wave in range(waves):
            landed = 0
            for gen, files in samples:
                deliver(cfg, gen, files, range(wave, wave + 1))
                landed += len(files[wave])
            result = defs.resolve_job_def("streaming_job").execute_in_process(
                instance=instance, raise_on_error=False, tags={"tidemark/wave": str(wave + 1)}
            )
            done = _materialized(result)
            bronze = sum(m.get("output_rows", 0) for k, m in done.items() if k.startswith("bronze"))
            gold = sum(m.get("output_rows", 0) for k, m in done.items() if k.startswith("gold"))
            late = sum(
                m.get("late_rows_dropped", 0) for k, m in done.items() if k.startswith("gold")
            )
            console.line(
                f"{console.elapsed()}  wave {wave + 1}/{waves}: {landed:,} lines sent, "
                f"{bronze:,} to bronze, {gold:,} gold rows, {late:,} late dropped "
                f"(run {result.run_id[:8]} {'ok' if result.success else 'FAILED'})"
            )
            if not result.success:
                failures.append(f"wave {wave + 1}'s streaming run {result.run_id[:8]} failed")
        result = defs.resolve_job_def("tidemark_all_job").execute_in_process(
            instance=instance, raise_on_error=False, tags=incremental_tags(cfg)
        )
        checks = [
            e.event_specific_data
            for e in result.all_events
            if e.event_type_value == "ASSET_CHECK_EVALUATION"
        ]
        failed = sorted(c.asset_check_key.name for c in checks if not c.passed)
        console.line(
            f"{console.elapsed()}  whole graph with reconciliation: "
            f"{len(_materialized(result))} assets, {len(checks) - len(failed)}/"
            f"{len(checks)} checks passed (run {result.run_id[:8]} "
            f"{'ok' if result.success else 'FAILED'})"
        )
        for name in failed:
            console.line(f"      failed check: {name}")
        if not result.success:
            failures.append(f"the whole-graph run {result.run_id[:8]} failed")
        summary = collect(get_spark(cfg), cfg)
        console.line(f"{console.elapsed()}  main job done")
        console.line(render(summary, cfg))
        if not summary.recon.clean:
            failures.append("the reconciliation is not clean (above)")
        if failures:
            console.line("tidemark run: exit 1: " + "; ".join(failures))
    return 1 if failures else 0


def server_command(
    action: str,
    title: str,
    start: Callable[[], object],
    stop: Callable[[], bool],
    discover: Callable[[], object | None],
    describe: Callable[[object], str],
    absent: str,
) -> int:
    """``start``, ``stop`` or ``status`` of one of the servers tidemark runs: one line each;
    status exits 1 when none runs."""
    if action == "start":
        print(f"{title} {describe(start())}")
    elif action == "stop":
        print(f"{title} stopped" if stop() else f"no {title} was running")
    else:
        found = discover()
        print(f"{title} {describe(found)}" if found else absent)
        return 0 if found else 1
    return 0


def cluster(cfg: TidemarkConfig, action: str) -> int:
    from streaming_jobs.services import spark_cluster

    def describe(found) -> str:
        if action == "start":
            return (
                f"{found.master}: {found.workers} workers (pid {found.pid}), UI {found.ui}; logs "
                f"{cfg.paths.logs}/spark-*.log. Use it with TIDEMARK_SPARK_MASTER={found.master}"
            )
        state = spark_cluster.status(found.ui_port)
        return (
            f"{found.master} (pid {found.pid}), UI {found.ui}: "
            f"{state.get('aliveworkers', 0)} workers alive, cores {state.get('coresused', 0)}"
            f"/{state.get('cores', 0)} used, {len(state.get('activeapps', []))} applications"
        )

    return server_command(
        action,
        "Spark cluster",
        lambda: spark_cluster.start(cfg, owned=False),
        lambda: spark_cluster.stop(cfg),
        lambda: spark_cluster.discover(cfg),
        describe,
        f"no Spark cluster runs for {cfg.data_root}",
    )


def kafka(cfg: TidemarkConfig, action: str) -> int:
    from streaming_jobs.services import kafka_broker

    return server_command(
        action,
        "Kafka broker",
        lambda: kafka_broker.start(cfg, owned=False),
        lambda: kafka_broker.stop(cfg),
        lambda: kafka_broker.discover(cfg),
        lambda broker: (
            f"(KRaft) on {broker.bootstrap} (pid {broker.pid}), storage "
            f"{kafka_broker.home(cfg)}; log {cfg.paths.logs / 'kafka.log'}"
        ),
        f"no Kafka broker runs for {cfg.data_root}",
    )


def s3(cfg: TidemarkConfig, action: str, bucket: str | None = None) -> int:
    from streaming_jobs.services import object_store
    from streaming_jobs.core.stores import ensure_bucket

    if action == "install":
        print(
            f"S3 server (SeaweedFS {object_store.SEAWEEDFS_VERSION}): {object_store.install(cfg)}"
        )
        return 0

    def start():
        server = object_store.start(cfg, owned=False)
        if bucket:
            ensure_bucket(cfg, bucket)
        return server

    return server_command(
        action,
        "S3 server",
        start,
        lambda: object_store.stop(cfg),
        lambda: object_store.discover(cfg),
        lambda server: (
            f"on {server.endpoint} (pid {server.pid}), files {cfg.s3.home}; log "
            f"{cfg.s3.home / 's3.log'}"
            + (f"; bucket {bucket}" if bucket and action == "start" else "")
        ),
        f"no S3 server runs from {cfg.s3.home} (start it: tidemark s3 start)",
    )


def dev(cfg: TidemarkConfig, port: int) -> int:
    """The SQL endpoint, then `dagster dev` (webserver + daemon) on loopback, until Ctrl-C."""
    import threading

    from orchestration.cli.live import DagsterDev, stop_like_ctrl_c
    from orchestration.cli.services import (
        describe_endpoint,
        start_sql_endpoint,
        stop_sql_endpoint,
    )

    if threading.current_thread() is threading.main_thread():
        # Dagster, the endpoint, and the broker or cluster this process started (they stop at
        # its exit) all stop
        stop_like_ctrl_c()
    prepare_dagster_home(cfg)
    store = start_store_if_used(cfg)  # the data root on the project's S3 server: it, while dev runs
    if store:
        print(f"Data: {store}", flush=True)
    spark_on = start_cluster_if_used(cfg)  # TIDEMARK_SPARK_MASTER names the project's cluster
    if spark_on:
        print(f"Spark: {spark_on}", flush=True)
    kafka = start_kafka_if_used(cfg)  # a stream reads Kafka: the project's broker, while dev runs
    if kafka:
        print(f"Kafka: {kafka}", flush=True)
    endpoint = start_sql_endpoint(cfg)
    print(f"SQL endpoint: {describe_endpoint(cfg, endpoint)}", flush=True)
    dagster = DagsterDev(cfg, port)
    try:
        dagster.start()
        print(
            f"Dagster UI: http://127.0.0.1:{port} (daemon running; log "
            f"{dagster.log_path}); Ctrl-C to stop",
            flush=True,
        )
        dagster.wait()
    except (KeyboardInterrupt, SystemExit):
        print("stopping...", flush=True)
    finally:
        dagster.stop()
        stop_sql_endpoint(cfg)
    return 0


def sql(cfg: TidemarkConfig, action: str) -> int:
    from streaming_jobs.services.sql_endpoint import discover

    from orchestration.cli.services import (
        describe_endpoint,
        start_sql_endpoint,
        stop_sql_endpoint,
    )

    if action == "stop" and cfg.sql.shared:
        print(f"the shared SQL endpoint {cfg.sql.shared} is not tidemark's: left running")
        return 0
    return server_command(
        action,
        "SQL endpoint",
        lambda: start_sql_endpoint(cfg, owned=False),
        lambda: stop_sql_endpoint(cfg),
        lambda: discover(cfg),
        lambda found: f"on {describe_endpoint(cfg, found)}",
        f"no SQL endpoint answers for {cfg.data_root}"
        + (f" (TIDEMARK_SQL_ENDPOINT={cfg.sql.shared})" if cfg.sql.shared else ""),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tidemark", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("setup", help="resolve jars, prepare Dagster home, parse dbt")
    run_p = sub.add_parser("run", help="the main job on the embedded default")
    run_p.add_argument("--events", type=int, default=24_000)
    run_p.add_argument("--waves", type=int, default=4)
    run_p.add_argument("--seed", type=int, default=7)
    run_p.add_argument(
        "--fresh",
        action="store_true",
        help="clear the data root's run state first (keeps Dagster history)",
    )
    sub.add_parser("summary", help="rows per table and the latest reconciliation")
    sub.add_parser("recon", help="the latest reconciliation report of every job")
    dev_p = sub.add_parser("dev", help="the SQL endpoint, Dagster UI and daemon on 127.0.0.1")
    dev_p.add_argument("--port", type=int, default=3000)
    live_p = sub.add_parser("live", help="the always-on setup for a bounded time, then the summary")
    live_p.add_argument("--minutes", type=float, default=5.0, help="how long it runs (default 5)")
    live_p.add_argument(
        "--rate", type=float, default=40.0, help="events landed per second per stream (default 40)"
    )
    live_p.add_argument("--port", type=int, default=3000)
    live_p.add_argument(
        "--recon-every",
        type=int,
        default=2,
        help="minutes between scheduled reconciliations (default 2)",
    )
    live_p.add_argument(
        "--fresh", action="store_true", help="clear the data root's run state first"
    )
    sql_p = sub.add_parser("sql", help="the SQL endpoint dbt uses (Spark's Thrift server)")
    sql_p.add_argument("action", choices=("start", "stop", "status"))
    kafka_p = sub.add_parser("kafka", help="the project's own Kafka broker (KRaft, 127.0.0.1)")
    kafka_p.add_argument("action", choices=("start", "stop", "status"))
    s3_p = sub.add_parser(
        "s3", help="the project's own S3-compatible store (SeaweedFS, 127.0.0.1; built once)"
    )
    s3_p.add_argument("action", choices=("install", "start", "stop", "status"))
    s3_p.add_argument("--bucket", help="make this bucket too (start), if it is not there")
    cluster_p = sub.add_parser(
        "cluster", help="the project's own Spark standalone cluster (master + workers, 127.0.0.1)"
    )
    cluster_p.add_argument("action", choices=("start", "stop", "status"))
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
    restore_p.add_argument(
        "--any-version",
        action="store_true",
        help="restore a savepoint taken under another version of the job (the next run then "
        "checks the change against the savepoint's state)",
    )
    rescale_p = sub.add_parser(
        "rescale",
        help="Spark's offline repartitioning of a stopped job's state (Spark 4.2.0 rewrites "
        "nothing and the command says so: use rebuild JOB --partitions N)",
    )
    rescale_p.add_argument("job")
    rescale_p.add_argument("partitions", type=int)
    sub.add_parser("check", help="analyse every job without running it (errors name the file)")
    settings_p = sub.add_parser("settings", help="every TIDEMARK_* setting with its default")
    settings_p.add_argument(
        "--write", action="store_true", help="put the table into docs/configuration.md"
    )
    sub.add_parser("maintain", help="retention now: OPTIMIZE, VACUUM, pruning, landing archive")
    rebuild_p = sub.add_parser(
        "rebuild",
        help="run the job's code over all of bronze beside the live version, then swap it in",
    )
    rebuild_p.add_argument("job")
    rebuild_p.add_argument(
        "--partitions",
        type=int,
        default=None,
        help="the new version's state partitions (a rescale); default: Spark's setting",
    )
    rebuild_p.add_argument(
        "--skip-recon",
        action="store_true",
        help="swap the new version in without reconciling it first",
    )
    rebuild_p.add_argument(
        "--from-scratch",
        action="store_true",
        help="instead: delete the checkpoint, gold, savepoints and ops rows; the next run "
        "streams bronze again (gold is empty until it has)",
    )
    rebuild_p.add_argument(
        "--force",
        action="store_true",
        help="with --from-scratch: even though the job fails since its last commit",
    )
    rollback_p = sub.add_parser(
        "rollback", help="put back the version of a job the last swap replaced"
    )
    rollback_p.add_argument("job")
    code_p = sub.add_parser(
        "code",
        help="the job's file against the version its checkpoint records, as a diff "
        "(exit 1 if they differ)",
    )
    code_p.add_argument("job")
    code_p.add_argument(
        "--put-back",
        action="store_true",
        help="write the checkpoint's copy of the job's file back (after a rollback, or a "
        "change the check refused)",
    )
    accept_p = sub.add_parser(
        "accept",
        help="run a changed job on its checkpoint: its state is declared fit for the new "
        "version (alert job_change_refused)",
    )
    accept_p.add_argument("job")
    release_p = sub.add_parser(
        "release", help="let a query held on a failing batch run again (alert job_held)"
    )
    release_p.add_argument("query", help="a job, or bronze_<stream> for an ingestion")
    repair_p = sub.add_parser(
        "repair",
        help="set aside a checkpoint's torn newest offsets or commits file (an ingestion's, "
        "or a job's commits file), when it is safe (alert checkpoint_corrupt)",
    )
    repair_p.add_argument("query", help="a job, or bronze_<stream> for an ingestion")
    mat_p = sub.add_parser("materialize", help="materialize a selection of assets in one run")
    mat_p.add_argument(
        "--select",
        required=True,
        help="Dagster asset selection, e.g. '+key:gold/my_job' or 'group:streaming'",
    )
    mat_p.add_argument(
        "--partition",
        metavar="DAY|FROM:TO",
        help="reconciliation days (YYYY-MM-DD) to recompute, at least; the first "
        "day on is a full reconciliation. Default: an incremental run "
        "labelled with today",
    )
    new_p = sub.add_parser("new", help="write a commented stream or job file that loads as is")
    new_p.add_argument("kind", choices=("stream", "job"))
    new_p.add_argument("name")
    new_p.add_argument("--source", help="the stream a job reads (job only)")
    kind_g = new_p.add_mutually_exclusive_group()
    kind_g.add_argument("--sql", action="store_true", help="a SQL job (the default)")
    kind_g.add_argument("--python", action="store_true", help="a Python job")
    new_p.add_argument(
        "--keyed",
        action="store_true",
        help="(with --python) keyed state per --key: a transformWithStateInPandas "
        "processor with an event-time TTL timer",
    )
    new_p.add_argument(
        "--key",
        help="the column a --keyed job groups by (default: the stream's "
        "first text field besides its key)",
    )
    new_p.add_argument(
        "--folder",
        help="where to write it (default: the first folder of TIDEMARK_JOBS_PATH, else ./jobs)",
    )
    sub.add_parser("generate", help="write landing files", add_help=False)
    args, rest = parser.parse_known_args(argv)
    try:
        cfg = TidemarkConfig.from_env()
        if args.command not in STORELESS_COMMANDS:
            start_store_if_used(cfg)
        if args.command == "setup":
            setup(cfg)
            return 0
        if args.command == "run":
            return run(cfg, args.events, args.waves, args.seed, args.fresh)
        if args.command == "summary":
            from orchestration.cli.summary import collect, render

            summary = collect(get_spark(cfg), cfg)
            print(render(summary, cfg))
            # a reconciliation that never ran is not a failure of the data root; one that
            # failed, or left a job unreconciled or unexplained, is (its last line says so)
            return 0 if summary.recon.clean or not summary.recon.ran else 1
        if args.command == "recon":
            from orchestration.recon import recon_runs
            from orchestration.cli.summary import recon_lines

            status = recon_runs.status(cfg)  # the ops table, read without a JVM
            print(
                "\n".join(
                    [f"tidemark reconciliation (data root {cfg.data_root})", *recon_lines(status)]
                )
            )
            return 0 if status.clean else 1
        if args.command == "settings":
            from streaming_jobs.core.config import CHECKOUT
            from streaming_jobs.core.settings import render, write

            if args.write:
                doc = CHECKOUT / "docs" / "configuration.md"
                print(f"{doc}: {'updated' if write(doc) else 'already current'}")
            else:
                print(render())
            return 0
        if args.command == "dev":
            return dev(cfg, args.port)
        if args.command == "sql":
            return sql(cfg, args.action)
        if args.command == "kafka":
            return kafka(cfg, args.action)
        if args.command == "s3":
            return s3(cfg, args.action, args.bucket)
        if args.command == "cluster":
            return cluster(cfg, args.action)
        if args.command == "live":
            from orchestration.cli.live import live

            if args.fresh:
                reset_demo_root(cfg)
            from orchestration.cli.terminal import Console

            with Console(cfg, "live") as console:
                console.line(f"  full log: {console.log_path}")
                return live(
                    cfg,
                    minutes=args.minutes,
                    rate=args.rate,
                    port=args.port,
                    recon_every_minutes=args.recon_every,
                    out=console.line,
                )
        if args.command in OPERATIONS:
            from orchestration.cli import operate

            return getattr(operate, args.command)(cfg, args)
        from streaming_jobs.storage.generator import main as generator_main

        return generator_main(rest)
    except (
        ConfigError,
        SparkStartupError,
        OperationError,
        ServiceError,
        StreamRunError,
        UnsafeChange,
        CheckpointBusy,
        KafkaSourceError,
        StoreError,
    ) as exc:
        # expected failures: one message naming what failed and what to do, no traceback
        print(f"tidemark: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
