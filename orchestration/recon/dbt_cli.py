"""``tidemark-dbt``: the dbt command line with tidemark's Spark and job parameters.

Where dbt's SQL runs (``TIDEMARK_DBT_TARGET``: ``auto``, ``endpoint`` or ``session``):

- ``endpoint``: the data root's SQL endpoint (`streaming_jobs.services.sql_endpoint`), a warm Spark
  process that owns the metastore; this process starts no JVM. ``auto`` picks it when it runs.
  Or a Thrift server of your own that several data roots share (``TIDEMARK_SQL_ENDPOINT``):
  this data root's schemas carry its prefix (``TIDEMARK_DBT_SCHEMA_PREFIX``) and their tables
  stay under its warehouse (macros/lake.sql); the lake tables no stream made yet are created
  here first, since that server keeps no data root's lake.
- ``session``: a SparkSession in this process, created first from `streaming_jobs.storage.spark` (the
  same Delta, time-zone and jar settings as the streaming jobs, plus the Derby metastore under
  the data root) and reused by dbt-spark's session method. The metastore lock is held for the
  whole invocation, so two of these never open Derby at once (the second waits).

The job registry is passed as ``--vars`` (the batch models use the very window, slide and
tolerance the stream uses), with one snapshot of the streams' position for the whole
invocation: ``progress_version`` (the version of ``ops/stream_progress`` every model reads)
and ``gold_versions`` (each job's gold table as of the last batch that snapshot records).
Streams that keep running while dbt reads cannot make the models disagree with each other.
Each job's reconciliation recomputes only the days its new events can change
(``recon_from``, `orchestration.recon.recon_scope`), and a job nothing new reached is left out of
``build``, ``run`` and ``test`` (``--exclude``, `recon_scope.left_out`); ``--full`` (or
dbt's ``--full-refresh``) recomputes every day of every job, a backfill. The scope of each job is printed first.
The vars that change every run (the position and the scope, `RUN_VARS`) reach the models in
the environment (``TIDEMARK_DBT_RUN_VARS``, read by macros/run_vars.sql), not in ``--vars``:
dbt parses the whole project again whenever ``--vars`` change. dbt parses first, in the data
root's own target path (not a Dagster run's, which is new every run), so its partial parse holds
from one invocation to the next. In session mode the JVM's start (about 10 s) and its first use
of the metastore and of Delta (about 10 s more) overlap that parse: a thread starts and warms
the session while this one parses, then dbt runs the command on that manifest (`SessionWarmup`).
Dagster's DbtCliResource runs this instead of ``dbt`` (with ``--data-root PATH`` first: the
run's data root, from its resource).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from datetime import datetime, timezone

from streaming_jobs.core.locations import Location
from streaming_jobs.core.config import TidemarkConfig

from orchestration.recon.dbt_vars import dbt_vars

# Commands that run SQL need Spark; parse, ls, clean, debug do not.
NEEDS_SPARK = {
    "build",
    "run",
    "test",
    "seed",
    "snapshot",
    "show",
    "compile",
    "docs",
    "run-operation",
}
TAKES_VARS = NEEDS_SPARK | {"parse", "list", "ls"}
MISSING_TABLES_WAIT_SECONDS = 60.0
# Commands that read the manifest, which tidemark-dbt parses first when a session warms up
# (not `docs`: `docs serve` needs no manifest, and `docs generate` keeps its own parse)
PARSE_FIRST = NEEDS_SPARK - {"docs"}
# Options that change what `dbt parse` makes of the project (the rest only select or run)
VALUED_PARSE_OPTIONS = {
    "--target",
    "-t",
    "--profile",
    "--profiles-dir",
    "--project-dir",
    "--target-path",
    "--vars",
}
PARSE_FLAGS = {"--partial-parse", "--no-partial-parse"}
# Commands whose nodes a run leaves out for jobs nothing new reached (`recon_scope.left_out`)
SELECTS_MODELS = {"build", "run", "test"}
# The vars that are each invocation's own: the streams' pinned position and what the run
# recomputes, and what tidemark-dbt reads from the lake and the settings (the measures that
# are not numbers, the health check's watermark limit). dbt parses the whole project again
# whenever --vars change (7 s or more of a build), so they reach the models in the environment
# instead (macros/run_vars.sql reads them while the run runs), and --vars keep what changes only
# with the jobs.
RUN_VARS = (
    "progress_version",
    "gold_versions",
    "recon_from",
    "recon_positions",
    "recon_reasons",
    "recon_full",
    "text_measures",
    "watermark_ahead_seconds",
    "shadow_gold",
    "shadow_names",
)
RUN_VARS_ENV = "TIDEMARK_DBT_RUN_VARS"
# A rebuild's shadow reconciled before its swap (`shadow_setting`)
SHADOW_ENV = "TIDEMARK_DBT_SHADOW"


def with_vars(args: list[str], variables: dict) -> list[str]:
    command_at = next((i for i, a in enumerate(args) if not a.startswith("-")), None)
    if command_at is None or args[command_at] not in TAKES_VARS or "--vars" in args:
        return args
    return [*args[: command_at + 1], "--vars", json.dumps(variables), *args[command_at + 1 :]]


def with_excluded(args: list[str], models: list[str]) -> list[str]:
    """``args`` with ``models`` added to its ``--exclude`` (one is added if there is none)."""
    if not models:
        return args
    if "--exclude" in args:
        at = args.index("--exclude") + 1
        return [*args[:at], *models, *args[at:]]
    return [*args, "--exclude", *models]


def choose_target(cfg: TidemarkConfig, wanted: str) -> tuple[str, object]:
    """('endpoint', its address) or ('session', None), as ``wanted`` and the endpoint allow."""
    from streaming_jobs.services.sql_endpoint import discover

    endpoint = discover(cfg) if wanted in ("auto", "endpoint") else None
    if wanted == "endpoint" and endpoint is None:
        raise SystemExit(
            "tidemark-dbt: TIDEMARK_DBT_TARGET=endpoint but no SQL endpoint runs "
            f"for {cfg.data_root}; start it with 'tidemark sql start'"
        )
    return ("endpoint", endpoint) if endpoint else ("session", None)


def with_target(args: list[str], target: str, endpoint) -> tuple[list[str], object]:
    """``args`` with ``--target`` (unless they name one), and the endpoint's address in the
    environment the profile reads."""
    if "--target" not in args and "-t" not in args:
        args = [*args, "--target", target]
    if endpoint is not None:
        os.environ["TIDEMARK_SQL_HOST"] = endpoint.host
        os.environ["TIDEMARK_SQL_PORT"] = str(endpoint.port)
    return args, endpoint


def keep_connections_open() -> None:
    """Each dbt thread keeps one connection to the endpoint for the whole invocation.

    dbt closes a node's connection when the node ends and opens another for the next. On
    Spark's Thrift server a close ends a Hive session, and the embedded metastore then builds its
    DataNucleus factory again: the server's own Hive and Spark's catalog name the metastore
    differently, so each switch between them starts it over. That was a quarter of the
    endpoint's CPU in a build (docs/benchmarks.md). A statement that failed leaves its session
    usable, and dbt's cleanup at the end of the invocation closes every connection.
    (dbt-snowflake's ``reuse_connections`` does the same.)
    """
    from dbt.adapters.spark.connections import SparkConnectionManager

    def release(self) -> None:  # the connection stays open for this thread's next node
        return None

    SparkConnectionManager.release = release


FIRST_POLL_SECONDS = 0.05  # then doubled, up to the profile's poll_interval


def poll_quickly() -> None:
    """A statement on the endpoint is polled at 0.05 s, then twice as long each time, up to
    the profile's ``poll_interval``.

    dbt-spark runs each statement asynchronously and sleeps ``poll_interval`` seconds (a whole
    number: the profile's schema takes no fraction) between asking whether it is done, so a
    statement of 0.2 s took a whole second, and a build of hundreds of them waited most of its
    time (docs/benchmarks.md, "dbt's polling"). Its loop reads ``poll_interval`` before each
    sleep: here that attribute answers the next wait of the back-off, restarted by each
    statement. A long statement is still asked at most every ``poll_interval`` seconds.
    """
    from dbt.adapters.spark import connections

    base = connections.PyhiveConnectionWrapper
    if getattr(base, "quick_polls", False):
        return

    class QuickPolls(base):
        quick_polls = True

        def __init__(self, handle, poll_interval: int = 5, *args, **kwargs) -> None:
            self._polls = 0
            super().__init__(handle, poll_interval, *args, **kwargs)

        @property
        def poll_interval(self) -> float:
            wait = min(self._longest, FIRST_POLL_SECONDS * 2**self._polls)
            self._polls += 1
            return wait

        @poll_interval.setter
        def poll_interval(self, value: float) -> None:
            self._longest = value

        def execute(self, sql: str, bindings=None) -> None:
            self._polls = 0
            return super().execute(sql, bindings)

    connections.PyhiveConnectionWrapper = QuickPolls


def _wait_for_lake(cfg: TidemarkConfig) -> None:
    """The endpoint creates missing lake tables within seconds; wait for them."""
    from streaming_jobs.runtime.tables import missing

    deadline = time.monotonic() + MISSING_TABLES_WAIT_SECONDS
    while (absent := missing(cfg)) and time.monotonic() < deadline:
        time.sleep(1.0)
    if absent:
        raise SystemExit(
            f"tidemark-dbt: lake tables {', '.join(absent)} do not exist and the "
            "SQL endpoint did not create them; see its log under "
            f"{cfg.paths.logs}"
        )


def _make_lake(cfg: TidemarkConfig, endpoint) -> None:
    """The lake tables no stream made yet, created before dbt reads them. A shared endpoint
    keeps no data root's lake, so it is asked to create them (`creation_statements`); where
    that cannot be (a gold schema no Spark has made for the job as it is now), they are created
    in a JVM of this process's own."""
    from streaming_jobs.runtime.tables import creation_statements, ensure_lake, missing
    from streaming_jobs.storage import ops_tables

    if missing(cfg):
        ops_tables.ensure_all(cfg)
    absent = missing(cfg)
    statements = creation_statements(cfg, absent) if absent else None
    if statements:
        try:
            _run_on(endpoint, statements)
        except Exception as exc:  # noqa: BLE001 - what is still missing is created below
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            print(
                f"tidemark-dbt: the SQL endpoint did not create the lake tables "
                f"{', '.join(absent)} ({first}); creating them here",
                file=sys.stderr,
            )
        absent = missing(cfg)
    if absent:
        from streaming_jobs.storage.spark import get_spark

        ensure_lake(get_spark(cfg), cfg)


def _run_on(endpoint, statements: list[str]) -> None:
    """Run ``statements`` on the endpoint, one connection for all (dbt's profile's user)."""
    from contextlib import closing

    from pyhive import hive

    with closing(hive.connect(host=endpoint.host, port=endpoint.port, username="tidemark")) as c:
        with closing(c.cursor()) as cursor:
            for statement in statements:
                cursor.execute(statement)


def split_run_vars(args: list[str]) -> tuple[list[str], dict]:
    """``args`` without the `RUN_VARS` in their ``--vars``, and those vars."""
    if "--vars" not in args:
        return args, {}
    import yaml  # dbt reads --vars as YAML (JSON is YAML)

    at = args.index("--vars") + 1
    values = yaml.safe_load(args[at]) or {}
    own = {key: values.pop(key) for key in RUN_VARS if key in values}
    return [*args[:at], json.dumps(values), *args[at + 1 :]], own


def parse_args(args: list[str], target_path: str | None = None) -> list[str]:
    """The ``dbt parse`` that makes the manifest ``args`` would make (and prints only errors).
    ``target_path``: where it keeps dbt's partial-parse file, unless ``args`` name one (a
    Dagster run's own target path is new every run, and would start every parse over)."""
    out = ["parse", "--quiet"]
    for i, arg in enumerate(args):
        name = arg.split("=", 1)[0]
        if name in VALUED_PARSE_OPTIONS:
            out += [arg] if "=" in arg else args[i : i + 2]
        elif arg in PARSE_FLAGS:
            out.append(arg)
    if target_path and not any(a.split("=", 1)[0] == "--target-path" for a in out):
        out += ["--target-path", target_path]
    return out


class SessionWarmup:
    """This process's SparkSession started, and its metastore client and Delta warmed, in a
    thread, while dbt parses in the caller's. dbt-spark's ``getOrCreate`` then finds the session;
    ``join`` raises what the thread raised."""

    def __init__(self, cfg: TidemarkConfig):
        self.cfg, self.error = cfg, None
        self.thread = threading.Thread(
            target=self._run, name="tidemark-session-warmup", daemon=True
        )
        self.thread.start()

    def _run(self) -> None:
        try:
            from streaming_jobs.storage.spark import get_spark

            spark = get_spark(self.cfg, hive_metastore=True)
            spark.sql("show databases").collect()  # the metastore client and Derby
            # Delta's first snapshot in this JVM; every model reads the progress table
            spark.read.format("delta").load(
                Location.of(self.cfg.paths.table("ops", "stream_progress")).spark
            )
        except BaseException as error:  # noqa: BLE001 - handed to join()
            self.error = error

    def join(self) -> None:
        self.thread.join()
        if self.error is not None:
            raise self.error


# tidemark's own options, before the dbt command: the run's data root, and the Dagster run
# that started this invocation (recorded with the reconciliation's outcome)
OWN_OPTIONS = {
    "--data-root": "TIDEMARK_DATA_ROOT",
    "--dagster-run-id": "TIDEMARK_DAGSTER_RUN_ID",
    "--shadow": SHADOW_ENV,
}


def shadow_setting(cfg: TidemarkConfig, job: str) -> tuple[TidemarkConfig, dict]:
    """``--shadow JOB``: reconcile the new version a rebuild built beside ``job`` before it is
    swapped in (`orchestration.recon.gate`). The configuration sees the job's checkpoint and
    gold table through the shadow; the models read the shadow's gold and its progress rows as
    the job's (vars shadow_gold, shadow_names), in schemas and a warehouse of their own (the
    live reconciliation's tables are not touched), over every day; and nothing is recorded in
    ops/recon_runs (the live job's reconciliation status is not the shadow's)."""
    from orchestration.recon.dbt_vars import shadow_name

    cfg = cfg.with_shadow(job)
    shadow = Location.of(cfg.paths.shadow(job))
    os.environ["TIDEMARK_DBT_SCHEMA_PREFIX"] = (
        os.environ.get("TIDEMARK_DBT_SCHEMA_PREFIX", "") + f"shadow_{job}_"
    )
    os.environ["TIDEMARK_DBT_WAREHOUSE"] = (shadow / "dbt").spark
    return cfg, {
        "shadow_gold": {job: Location.of(cfg.paths.table("gold", job)).spark},
        "shadow_names": {shadow_name(job): job},
    }


def split_own_options(args: list[str]) -> tuple[dict[str, str], list[str]]:
    """tidemark's leading options (as the environment variables they set) and the rest, for
    dbt."""
    own = {}
    while len(args) >= 2 and args[0] in OWN_OPTIONS:
        own[OWN_OPTIONS[args[0]]] = args[1]
        args = args[2:]
    return own, args


def installed_versions() -> str:
    """``--version``'s answer, in dbt's layout, from the installed packages' metadata.

    Dagster's dbt resource asks for it before every dbt step of a run. dbt's own answer imports
    dbt (about 2 s of CPU) and asks the package index for the latest release, a network call
    a reconciliation must not wait on; the installed versions are all either is read for."""
    from importlib.metadata import version

    return (
        f"Core:\n  - installed: {version('dbt-core')}\n\n"
        f"Plugins:\n  - spark: {version('dbt-spark')}\n\n"
        "(tidemark-dbt: the installed versions; no check for newer releases)"
    )


def main(argv: list[str] | None = None) -> int:
    own, args = split_own_options(list(sys.argv[1:] if argv is None else argv))
    if args == ["--version"]:
        print(installed_versions())
        return 0
    os.environ.update(own)  # this process's own environment, and dbt's
    cfg = TidemarkConfig.from_env()
    shadow = os.environ.get(SHADOW_ENV)
    shadow_vars = {}
    if shadow:
        cfg, shadow_vars = shadow_setting(cfg, shadow)
    # as Spark addresses it (s3a://... on a store): dbt's SQL names lake tables by path
    os.environ["TIDEMARK_DATA_ROOT"] = Location.of(cfg.data_root).spark
    from orchestration.recon.project import run_project_dir

    os.environ.setdefault("DBT_PROFILES_DIR", str(run_project_dir(cfg)))
    os.environ.setdefault("DBT_PROJECT_DIR", str(run_project_dir(cfg)))
    os.environ.setdefault("DBT_TARGET_PATH", str(cfg.paths.dbt / "target"))
    os.environ.setdefault("DBT_LOG_PATH", str(cfg.paths.dbt / "logs"))
    from orchestration.recon.dbt_models import sync

    sync(cfg)  # the data root's copy of the project, with the models generated from the registries
    command = next((a for a in args if not a.startswith("-")), None)
    if command in NEEDS_SPARK:
        with reconciliation_lock(cfg, command) as fence:
            return _invoke(cfg, args, command, shadow, shadow_vars, fence)
    return _invoke(cfg, args, command, shadow, shadow_vars)


def reconciliation_lock(cfg: TidemarkConfig, command: str):
    """One invocation that runs SQL at a time per data root and schema prefix (a rebuild's
    shadow has its own): two builds would replace the same tables, and ``stg_stream_progress``
    at their own pins, under each other, and each would report what the other built. Dagster
    runs one reconciliation at a time already (`orchestration.lib.concurrency`); this also
    holds for a build by hand, a model materialized from the UI, and another machine on a data
    root on a store (there a lease in the data root, an ``flock`` on a disk). The second
    invocation says who holds it and waits for it to end."""
    from streaming_jobs.core.leases import exclusive

    prefix = os.environ.get("TIDEMARK_DBT_SCHEMA_PREFIX", "")
    place = Location.of(cfg.paths.root) / "dbt" / f"{prefix}reconciliation.lock"

    def waiting(holder: str) -> None:
        print(
            f"tidemark-dbt: {command} waits for {holder}, which runs dbt on {cfg.data_root}"
            f"{f' (schema prefix {prefix})' if prefix else ''}: two at once would replace "
            "each other's tables. It goes on when that one ends; stop that one to go on now.",
            file=sys.stderr,
            flush=True,
        )

    run = os.environ.get("TIDEMARK_DAGSTER_RUN_ID")
    holder = f"tidemark-dbt {command}" + (f" of Dagster run {run}" if run else "")
    return exclusive(place, holder, wait=float("inf"), waiting=waiting)


def lock_lost(fence) -> str | None:
    """Why this invocation no longer holds the reconciliation lock ``fence`` (a lease on a
    store, taken over while the build ran: it was paused past its term), or None. A lock that
    cannot be checked (the store out of reach) counts as lost: nothing vouches for the build."""
    from streaming_jobs.core.leases import Fenced

    if fence is None:
        return None
    try:
        fence.check()
    except Fenced as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001 - any failure to check leaves the build unvouched
        return f"the lock could not be checked ({exc})"
    return None


def _invoke(
    cfg: TidemarkConfig, args: list[str], command, shadow, shadow_vars: dict, fence=None
) -> int:
    metastore = warmup = endpoint = None
    if command in TAKES_VARS and command not in NEEDS_SPARK:
        # parse, ls: the target (and endpoint address) a build would take now, so that the
        # manifest this parse makes (Dagster's, at load) holds for the build's own parse: dbt
        # parses everything again when the profile or the target differ (no endpoint yet with
        # TIDEMARK_DBT_TARGET=endpoint is no error here: the build says so)
        wanted = "auto" if cfg.sql.dbt_target == "endpoint" else cfg.sql.dbt_target
        args, endpoint = with_target(args, *choose_target(cfg, wanted))
    if command in NEEDS_SPARK:
        args, endpoint = with_target(args, *choose_target(cfg, cfg.sql.dbt_target))
        if endpoint is not None:
            if cfg.sql.shared:
                _make_lake(cfg, endpoint)  # a shared endpoint keeps no data root's lake
            else:
                _wait_for_lake(cfg)
        else:
            from streaming_jobs.storage import ops_tables
            from streaming_jobs.storage.spark import get_spark
            from streaming_jobs.services.sql_endpoint import hold_metastore
            from streaming_jobs.runtime.tables import ensure_lake, missing

            metastore = hold_metastore(cfg, "a tidemark-dbt session", wait=True)
            # Models read every lake table: a stream that never ran yet has an empty one.
            if command in PARSE_FIRST and not missing(cfg):
                ops_tables.ensure_all(cfg)  # all there: only newer ops columns, without Spark
                warmup = SessionWarmup(cfg)
            else:
                ensure_lake(get_spark(cfg, hive_metastore=True), cfg)
    from dbt.cli.main import dbtRunner

    if command in NEEDS_SPARK and endpoint is not None:
        keep_connections_open()
        poll_quickly()

    from orchestration.recon import recon_runs

    started_at, result = datetime.now(timezone.utc), None
    try:
        from orchestration.recon.dbt_models import reconciled_jobs

        # --full (tidemark's) or dbt's --full-refresh: every day of every job (a backfill)
        full = "--full" in args or "--full-refresh" in args or bool(shadow)
        args = [a for a in args if a != "--full"]
        # (every job's, with --shadow too: the project's models need them to parse; the
        # caller selects the shadow's models)
        variables = dbt_vars(reconciled_jobs(), cfg if command in NEEDS_SPARK else None, full)
        variables.update(shadow_vars)
        for job, reason in variables.get("recon_reasons", {}).items():
            print(f"tidemark-dbt: {job}: {reason}", file=sys.stderr)
        if command in NEEDS_SPARK and not shadow:
            for job, note in recon_runs.version_notes(cfg, reconciled_jobs()).items():
                print(f"tidemark-dbt: {job}: warning: {note}", file=sys.stderr)
        if command in SELECTS_MODELS and "--vars" not in args:
            # (a caller that passes its own --vars, as Dagster's asset does, leaves them out
            # itself: it knows its selection)
            from orchestration.recon.recon_scope import left_out

            args = with_excluded(args, left_out(variables))
        args = with_vars(args, variables)
        if command in NEEDS_SPARK:
            args, own = split_run_vars(args)
            os.environ[RUN_VARS_ENV] = json.dumps(own)
        manifest = None
        if command in PARSE_FIRST:
            # (while the session warms up, in session mode) in the data root's own target
            # path, where dbt's partial parse holds from one invocation to the next
            parsed = dbtRunner().invoke(parse_args(args, str(cfg.paths.dbt / "target")))
            if warmup is not None:
                warmup.join()
            if not parsed.success:
                result = parsed
                return 2 if parsed.exception is not None else 1
            manifest = parsed.result
        result = dbtRunner(manifest=manifest).invoke(args)
    finally:
        if metastore is not None:
            metastore.close()
        lost = lock_lost(fence)
        if lost:
            print(
                f"tidemark-dbt: {command} lost the data root's reconciliation lock while it ran "
                f"({lost}): another build may have replaced its tables, so it counts as failed. "
                "Once no other build runs, run `tidemark-dbt build --full`.",
                file=sys.stderr,
            )
        if command == "build" and not shadow:
            # the outcome, whatever it is: a failed check skips recon_summary, never this
            recon_runs.record_outcome(cfg, result, started_at, lost)
    if result.exception is not None or lost:
        return 2
    return 0 if result.success else 1


if __name__ == "__main__":
    raise SystemExit(main())
