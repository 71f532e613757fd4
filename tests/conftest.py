"""Shared fixtures: one SparkSession for the whole session, one data root per test.

Helpers that are not fixtures (landing hand-made events, running tidemark-dbt) are in
``tests/helpers.py``; ``tests/`` is on the import path (pyproject's pytest settings).
"""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import threading
from pathlib import Path

import pytest

from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.storage.generator import GeneratorConfig, generate


# The tests' data are tens to thousands of rows. Every Spark the tests start (the shared
# session, tidemark-dbt, the SQL endpoint, Dagster's run workers, the chaos harness's workers:
# they inherit this environment) interprets projections (whole-stage code generation stays
# on): at this size Spark spends more time generating and compiling code for each projection
# than running it. The product keeps Spark's default: at 5 M events interpreted sorts and
# windows made a reconciliation 1.7 times as long (docs/benchmarks.md, "Code generation back on").
#
# The JVMs a test starts and ends (a killed run, a command, dbt on a data root of its own) live
# a minute or less: they compile hot code with the JVM's quick compiler only (C1,
# `-XX:TieredStopAtLevel=1`), without the optimizing one (C2), which took 39 % of such JVMs'
# time optimizing code they ended before it paid back. The two that live the whole session,
# the shared SparkSession and the shared SQL endpoint, keep C2: with C1 alone the tests on
# them ran up to twice as long (docs/testing.md).
#
# The results are the same either way; the tests that set TIDEMARK_SPARK_CONF themselves (the
# cluster, loopback) run Spark's defaults, as do the benchmarks and the soak, which are
# scripts. Each setting given in TIDEMARK_SPARK_CONF wins, e.g. Spark's and Java's defaults:
# TIDEMARK_SPARK_CONF="spark.sql.codegen.factoryMode=FALLBACK;spark.driver.defaultJavaOptions=" make test.
TESTS_SPARK_CONF = {"spark.sql.codegen.factoryMode": "NO_CODEGEN"}
SHORT_LIVED_SPARK_CONF = {"spark.driver.defaultJavaOptions": "-XX:TieredStopAtLevel=1"}


def _with(conf: str, added: dict[str, str]) -> str:
    """``conf`` (TIDEMARK_SPARK_CONF's text) with each of ``added`` it does not set."""
    more = [f"{k}={v}" for k, v in added.items() if f"{k}=" not in conf]
    return ";".join(filter(None, (conf, *more)))


# what the session-long JVMs take (the environment before the short-lived JVMs' setting)
LONG_LIVED_ENV: dict[str, str] = {}
GIVEN_SPARK_CONF = "TESTS_GIVEN_SPARK_CONF"


def pytest_configure(config):
    shared = getattr(config, "workerinput", {}).get("tidemark_servers")
    if shared is not None:  # a worker of `make test`: the controller's servers
        _SharedServers.base, _SharedServers.owner = Path(shared[0]), int(shared[1])
        _SharedServers.remote = True
    # what the user gave, kept for the workers of `make test` (they inherit the environment
    # made here, short-lived setting included)
    given = os.environ.setdefault(GIVEN_SPARK_CONF, os.environ.get("TIDEMARK_SPARK_CONF", ""))
    long_lived = _with(given, TESTS_SPARK_CONF)
    LONG_LIVED_ENV.update(os.environ, TIDEMARK_SPARK_CONF=long_lived)
    os.environ["TIDEMARK_SPARK_CONF"] = _with(long_lived, SHORT_LIVED_SPARK_CONF)


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from streaming_jobs.storage.spark import get_spark

    root = tmp_path_factory.mktemp("session-root")
    session = get_spark(TidemarkConfig.from_env(LONG_LIVED_ENV).with_data_root(root))
    yield session
    session.stop()


class _SharedSql:
    """The session's shared SQL endpoint, started in a thread as soon as the tests are
    collected (its JVM warms while the unit tests run), if any test will use it. Under
    `make test` (pytest-xdist) the controller starts one for both workers: a worker waits for
    it (`attach`), and each worker's tests keep schemas of their own (`WORKER` starts their
    prefix)."""

    thread: threading.Thread | None = None
    owner: TidemarkConfig | None = None
    endpoint = None
    error: BaseException | None = None
    remote = False  # a worker: the controller's endpoint, which the controller stops

    @classmethod
    def plan(cls, root, port: int | None = None) -> None:
        from streaming_jobs.services.processes import free_port

        cls.owner = TidemarkConfig.from_env(
            {
                "TIDEMARK_DATA_ROOT": str(root),
                "TIDEMARK_SQL_PORT": str(port or free_port()),
                # the session-long JVMs' Spark settings: this configuration is built from
                # this dict, not from the environment the other Sparks inherit
                "TIDEMARK_SPARK_CONF": LONG_LIVED_ENV["TIDEMARK_SPARK_CONF"],
            }
        )

    @classmethod
    def begin(cls) -> None:
        from streaming_jobs.services import sql_endpoint

        # the environment now, before any test runs: a test's monkeypatched variables (a jobs
        # folder of its own) must not reach the shared server, whenever its thread launches it
        environ = {**os.environ, "TIDEMARK_SPARK_CONF": LONG_LIVED_ENV["TIDEMARK_SPARK_CONF"]}

        def start() -> None:
            try:
                cls.endpoint = sql_endpoint.start(cls.owner, environ=environ)
            except BaseException as error:  # noqa: BLE001 - raised by the fixture
                cls.error = error
                # the workers of `make test` read why (`attach`)
                cls.error_file().write_text(f"{type(error).__name__}: {error}")

        cls.thread = threading.Thread(target=start, name="shared-sql-endpoint", daemon=True)
        cls.thread.start()

    @classmethod
    def error_file(cls):
        return cls.owner.data_root / "start-error.txt"

    @classmethod
    def attach(cls, timeout: float = 600.0):
        """In a worker: the controller's endpoint, once it answers (or why it did not)."""
        import time

        from streaming_jobs.services import sql_endpoint

        deadline = time.monotonic() + timeout
        while (found := sql_endpoint.discover(cls.owner)) is None:
            if cls.error_file().exists():
                raise RuntimeError(
                    f"the tests' shared SQL endpoint did not start: {cls.error_file().read_text()}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the tests' shared SQL endpoint did not answer in {timeout:.0f} s (its log: "
                    f"{sql_endpoint.SqlEndpoint(cls.owner).log})"
                )
            time.sleep(0.5)
        return found

    @classmethod
    def stop(cls) -> None:
        from streaming_jobs.services import sql_endpoint

        if cls.thread is not None:
            cls.thread.join()
            sql_endpoint.stop(cls.owner)


class _SharedServers:
    """The session's Kafka broker and S3 server: one of each for the whole session, started by
    the first test that needs it (under `make test`, in either worker, the other waiting on a
    lock), owned by the session's first process (the controller of `make test`): it outlives
    the worker that started it, stops at the session's end, and by itself if pytest dies. Each
    test keeps topics and buckets of its own."""

    base: Path | None = None  # the servers' folder: its settings, locks and data
    owner = os.getpid()
    remote = False  # a worker: the controller stops them

    @classmethod
    def folder(cls, factory) -> Path:
        if cls.base is None:
            cls.base = factory.mktemp("servers")
        return cls.base

    @classmethod
    def get(cls, factory, name: str, settings, start):
        """(server, its config): the running server ``name``, or one started now with the
        settings made once for the session (``settings(folder)``: its port and folders)."""
        base = cls.folder(factory)
        with open(base / f"{name}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when closed
            record = base / f"{name}.json"
            if record.exists():
                env = json.loads(record.read_text())
            else:
                env = settings(base)
                record.write_text(json.dumps(env))
            cfg = TidemarkConfig.from_env(env)
            return start(cfg, owner=cls.owner), cfg

    @classmethod
    def stop(cls) -> None:
        if cls.remote or cls.base is None:
            return
        from streaming_jobs.services import kafka_broker, object_store

        stops = {"kafka": kafka_broker.stop, "s3": object_store.stop}
        for record in sorted(cls.base.glob("*.json")):
            stops[record.stem](TidemarkConfig.from_env(json.loads(record.read_text())))


def pytest_configure_node(node):
    """The controller of `make test`, for each worker: where the one shared endpoint will be,
    and the shared servers' folder and owner."""
    if _SharedSql.owner is None:
        _SharedSql.plan(node.config._tmp_path_factory.mktemp("sql-root"))
    node.workerinput["tidemark_sql"] = [str(_SharedSql.owner.data_root), _SharedSql.owner.sql.port]
    base = _SharedServers.folder(node.config._tmp_path_factory)
    node.workerinput["tidemark_servers"] = [str(base), _SharedServers.owner]


def pytest_xdist_node_collection_finished(node, ids):
    """The controller: start the shared endpoint once a worker collected a test that may use it
    (outside tests/unit; a test marked own_sql is not told apart here)."""
    if _SharedSql.thread is None and any(not i.startswith("tests/unit/") for i in ids):
        _SharedSql.begin()


def pytest_unconfigure(config):
    if not _SharedSql.remote:  # the endpoint this process started, if any
        _SharedSql.stop()
    _SharedServers.stop()


# The test files that take longest, longest first (seconds in CI on 2026-11-30: `make test`'s
# JUnit report through tools/test_times.py). `make test` hands whole files to its two workers
# in collection order (--no-loadscope-reorder; xdist's own order, most tests first, started a
# one-test file of two minutes last, alone). So: the pure tests first (they fail in seconds),
# then these, then the rest, which fill in around them. A file missing here only runs later.
LONGEST_FILES = (
    "orchestration/test_dagster.py",  # 279 s
    "streaming/test_chaos.py",  # 177 s
    "orchestration/test_operations.py",  # 164 s
    "orchestration/test_add_a_job.py",  # 134 s
    "streaming/test_rebuild_beside.py",  # 121 s
    "streaming/test_retention_on_store.py",  # 99 s
    "streaming/test_retention.py",  # 96 s
    "orchestration/test_recon.py",  # 92 s
)


def pytest_collection_modifyitems(session, config, items):
    def rank(item) -> int:
        if item.path.parent.name == "unit":
            return -1
        where = f"{item.path.parent.name}/{item.path.name}"
        return LONGEST_FILES.index(where) if where in LONGEST_FILES else len(LONGEST_FILES)

    items.sort(key=rank)  # stable: each file's tests keep their order


def _uses_shared_sql(item) -> bool:
    return item.path.parent.name != "unit" and item.get_closest_marker("own_sql") is None


def pytest_collection_finish(session):
    shared = getattr(session.config, "workerinput", {}).get("tidemark_sql")
    if shared is not None:  # a worker of `make test`: the controller starts it
        _SharedSql.remote = True
        _SharedSql.plan(*shared)
    elif any(_uses_shared_sql(item) for item in session.items):
        _SharedSql.plan(session.config._tmp_path_factory.mktemp("sql-root"))
        _SharedSql.begin()


@pytest.fixture(scope="session")
def shared_sql():
    """One SQL endpoint for the whole session, as a team's own Thrift server that several data
    roots share (TIDEMARK_SQL_ENDPOINT): every test's dbt runs there, in its own schemas
    (TIDEMARK_DBT_SCHEMA_PREFIX) with its tables under its own data root, and no test pays a
    JVM start for dbt. Under `make test` the controller starts it for both workers. Stopped
    at the session's end (and by itself if pytest dies)."""
    if _SharedSql.remote:
        return _SharedSql.attach()
    assert _SharedSql.thread is not None, "no collected test was to use the shared endpoint"
    _SharedSql.thread.join()
    if _SharedSql.error is not None:
        raise _SharedSql.error
    return _SharedSql.endpoint


SCHEMA_PREFIXES = itertools.count()
# the workers of `make test` share one endpoint: each numbers its tests' schemas apart
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")


@pytest.fixture
def cfg(tmp_path, monkeypatch, request) -> TidemarkConfig:
    """A TidemarkConfig on a fresh data root, also exported for subprocesses (dbt).

    Outside tests/unit, dbt runs on the session's shared endpoint (`shared_sql`), in schemas
    of the test's own; a test marked ``own_sql`` runs dbt as a user's default setup does (a
    session of its own, or the data root's own endpoint: `endpoint_cfg`)."""
    root = tmp_path / "data"
    root.mkdir()
    monkeypatch.setenv("TIDEMARK_DATA_ROOT", str(root))
    for name in ("TIDEMARK_SQL_ENDPOINT", "TIDEMARK_DBT_SCHEMA_PREFIX"):
        monkeypatch.delenv(name, raising=False)
    if _uses_shared_sql(request.node):
        endpoint = request.getfixturevalue("shared_sql")
        monkeypatch.setenv("TIDEMARK_SQL_ENDPOINT", f"{endpoint.host}:{endpoint.port}")
        monkeypatch.setenv("TIDEMARK_DBT_SCHEMA_PREFIX", f"{WORKER}t{next(SCHEMA_PREFIXES)}_")
    return TidemarkConfig.from_env().with_data_root(root)


@pytest.fixture
def sample(cfg) -> tuple[GeneratorConfig, list[list[str]]]:
    """A small generated sample (not yet written)."""
    gen = GeneratorConfig(events=3000, files=3, seed=11)
    return gen, generate(gen)


@pytest.fixture(autouse=True)
def _no_dagster_home_leak(tmp_path, monkeypatch):
    # Dagster code under test must never touch a developer's real Dagster home.
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    (tmp_path / "dagster_home").mkdir(exist_ok=True)


@pytest.fixture(autouse=True)
def _strict_settings_after_each_test():
    # Loading the code location turns on tolerant settings for the process (a malformed
    # variable takes its default and is alerted); each test starts strict and clean again.
    yield
    from streaming_jobs.core.config import tolerate_bad_settings

    tolerate_bad_settings(False)


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory):
    """The project's own Kafka broker (KRaft, 127.0.0.1, a free port), one for the session
    (`_SharedServers`)."""
    from streaming_jobs.services import kafka_broker as broker_mod
    from streaming_jobs.services.processes import free_port

    def settings(base: Path) -> dict[str, str]:
        (base / "kafka-root").mkdir()
        return {
            "TIDEMARK_DATA_ROOT": str(base / "kafka-root"),
            "TIDEMARK_KAFKA_PORT": str(free_port()),
        }

    broker, _ = _SharedServers.get(tmp_path_factory, "kafka", settings, broker_mod.start)
    return broker


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory):
    """The project's own Spark standalone cluster (a master and two workers on 127.0.0.1, a
    free port), one for the session; stopped at its end (and by itself if pytest dies)."""
    from streaming_jobs.services import spark_cluster as cluster_mod
    from streaming_jobs.services.processes import free_port

    root = tmp_path_factory.mktemp("cluster-root")
    cfg = TidemarkConfig.from_env(
        {"TIDEMARK_DATA_ROOT": str(root), "TIDEMARK_CLUSTER_PORT": str(free_port())}
    )
    found = cluster_mod.start(cfg)
    yield found
    cluster_mod.stop(cfg)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """The project's own S3-compatible store (SeaweedFS on 127.0.0.1, a free port, its files
    in the session's temporary folder), one for the session (`_SharedServers`); built once per
    machine (its cache is outside the checkout)."""
    from streaming_jobs.services import object_store

    def settings(base: Path) -> dict[str, str]:
        (base / "s3-home").mkdir()
        port = object_store.paired_port()
        return {"TIDEMARK_S3_HOME": str(base / "s3-home"), "TIDEMARK_S3_PORT": str(port)}

    return _SharedServers.get(tmp_path_factory, "s3", settings, object_store.start)


@pytest.fixture
def s3_bucket(s3_server):
    """A bucket of this test's own on the session's S3 server: (obstore store, cfg, server,
    bucket name)."""
    import uuid

    from streaming_jobs.core.stores import ensure_bucket, s3_store

    server, s3_cfg = s3_server
    name = f"t-{uuid.uuid4().hex[:10]}"
    ensure_bucket(s3_cfg, name)
    return s3_store(s3_cfg, name), s3_cfg, server, name


@pytest.fixture
def kafka_cfg(cfg, kafka_broker, monkeypatch, request) -> TidemarkConfig:
    """``cfg`` with Kafka as every stream's source, on the session's broker, with topics of
    this test's own (also exported for subprocesses)."""
    import re
    import uuid

    prefix = f"{re.sub(r'[^a-z0-9]', '', request.node.name.lower())[:40]}.{uuid.uuid4().hex[:6]}."
    env = {
        "TIDEMARK_SOURCE": "kafka",
        "TIDEMARK_KAFKA_BOOTSTRAP": kafka_broker.bootstrap,
        "TIDEMARK_KAFKA_TOPIC_PREFIX": prefix,
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return TidemarkConfig.from_env().with_data_root(cfg.data_root)


@pytest.fixture
def endpoint_cfg(cfg, monkeypatch) -> TidemarkConfig:
    """``cfg`` with the data root's own SQL endpoint (a free port), stopped whatever the test
    does, as `make dev` and `make live` start it. Every tidemark-dbt invocation of the test
    (`helpers.dbt`, Dagster's dbt step) then runs in that warm JVM (target auto). The test
    must be marked ``own_sql`` (a data root's own endpoint is no shared one)."""
    assert cfg.sql.shared is None, "mark a test that uses endpoint_cfg with @pytest.mark.own_sql"
    from orchestration.cli.services import start_sql_endpoint, stop_sql_endpoint
    from streaming_jobs.services.processes import free_port

    monkeypatch.setenv("TIDEMARK_SQL_PORT", str(free_port()))
    cfg = TidemarkConfig.from_env().with_data_root(cfg.data_root)
    start_sql_endpoint(cfg)
    yield cfg
    stop_sql_endpoint(cfg)
