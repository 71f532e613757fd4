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

from cpu_by_process import read_tree, tree_use
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.storage.generator import GeneratorConfig, generate

CPU_AT_START = pytest.StashKey[float]()


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
# the shared SparkSession and the shared SQL endpoint, keep C2 (with C1 alone the tests on
# them ran up to twice as long) but optimize only code ten times as hot as Java's defaults ask:
# the same tests took 10-14 % less CPU at the same wall time, and thirty times was slower
# (docs/testing.md). Every one of them collects garbage with the serial collector
# (`-XX:+UseSerialGC`): the tests' heaps are small, and G1's parallel and concurrent threads
# took CPU from the other worker (the same six tests run alone, alternated: 192.7 and 193.0 s
# with G1, 168.7 and 179.6 s serial; in CI's two workers the gain stayed within the noise).
#
# The results are the same either way; the tests that set TIDEMARK_SPARK_CONF themselves (the
# cluster, loopback) run Spark's defaults, as do the benchmarks and the soak, which are
# scripts. Each setting given in TIDEMARK_SPARK_CONF wins, e.g. Spark's and Java's defaults:
# TIDEMARK_SPARK_CONF="spark.sql.codegen.factoryMode=FALLBACK;spark.driver.defaultJavaOptions=" make test.
TESTS_SPARK_CONF = {"spark.sql.codegen.factoryMode": "NO_CODEGEN"}
TESTS_GC = "-XX:+UseSerialGC"
SHORT_LIVED_SPARK_CONF = {"spark.driver.defaultJavaOptions": f"{TESTS_GC} -XX:TieredStopAtLevel=1"}
LONG_LIVED_SPARK_CONF = {
    "spark.driver.defaultJavaOptions": f"{TESTS_GC} -XX:Tier4InvocationThreshold=50000 "
    "-XX:Tier4MinInvocationThreshold=6000 -XX:Tier4CompileThreshold=150000 "
    "-XX:Tier4BackEdgeThreshold=400000"
}


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
    tests = _with(given, TESTS_SPARK_CONF)
    LONG_LIVED_ENV.update(os.environ, TIDEMARK_SPARK_CONF=_with(tests, LONG_LIVED_SPARK_CONF))
    os.environ["TIDEMARK_SPARK_CONF"] = _with(tests, SHORT_LIVED_SPARK_CONF)


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from streaming_jobs.storage.spark import get_spark

    root = tmp_path_factory.mktemp("session-root")
    session = get_spark(TidemarkConfig.from_env(LONG_LIVED_ENV).with_data_root(root))
    yield session
    session.stop()


def _sql_settings(base: Path) -> dict[str, str]:
    from streaming_jobs.services.processes import free_port

    (base / "sql-root").mkdir()
    return {
        "TIDEMARK_DATA_ROOT": str(base / "sql-root"),
        "TIDEMARK_SQL_PORT": str(free_port()),
        # the session-long JVMs' Spark settings: its configuration is built from this dict,
        # not from the environment the other Sparks inherit
        "TIDEMARK_SPARK_CONF": LONG_LIVED_ENV["TIDEMARK_SPARK_CONF"],
    }


def _sql_start(cfg: TidemarkConfig, owner: int):
    from streaming_jobs.services import sql_endpoint

    # the environment the session began with, never a test's monkeypatched variables (a jobs
    # folder of its own), whichever test starts it
    return sql_endpoint.start(cfg, environ=LONG_LIVED_ENV, owner=owner)


def _kafka_settings(base: Path) -> dict[str, str]:
    from streaming_jobs.services.processes import free_port

    (base / "kafka-root").mkdir()
    return {"TIDEMARK_DATA_ROOT": str(base / "kafka-root"), "TIDEMARK_KAFKA_PORT": str(free_port())}


def _s3_settings(base: Path) -> dict[str, str]:
    from streaming_jobs.services import object_store

    (base / "s3-home").mkdir()
    port = object_store.paired_port()
    return {"TIDEMARK_S3_HOME": str(base / "s3-home"), "TIDEMARK_S3_PORT": str(port)}


def _cluster_settings(base: Path) -> dict[str, str]:
    from streaming_jobs.services.processes import free_port

    (base / "cluster-root").mkdir()
    return {
        "TIDEMARK_DATA_ROOT": str(base / "cluster-root"),
        "TIDEMARK_CLUSTER_PORT": str(free_port()),
    }


def _service(name: str):
    """(start(cfg, owner=), stop(cfg)) of the project's server ``name``."""
    from streaming_jobs.services import kafka_broker, object_store, spark_cluster, sql_endpoint

    return {
        "sql": (_sql_start, sql_endpoint.stop),
        "kafka": (kafka_broker.start, kafka_broker.stop),
        "s3": (object_store.start, object_store.stop),
        "cluster": (spark_cluster.start, spark_cluster.stop),
    }[name]


SETTINGS = {
    "sql": _sql_settings,
    "kafka": _kafka_settings,
    "s3": _s3_settings,
    "cluster": _cluster_settings,
}


class _SharedServers:
    """The session's servers (the SQL endpoint, the S3 server, the Kafka broker, the Spark
    cluster): one of each for the whole session, started by the first test that needs it
    (under `make test`, in either worker, the other waiting on a lock), or earlier (`early`:
    the SQL endpoint, as soon as the tests are collected, so that its JVM warms while the unit
    tests run). Each is owned by the session's first process (the controller of `make test`):
    it outlives the worker that started it, stops at the session's end, and by itself if pytest
    dies. Each test keeps its own data root, schemas, topics and buckets."""

    base: Path | None = None  # the servers' folder: their settings, locks, errors and data
    owner = os.getpid()
    remote = False  # a worker: the controller stops them
    starting: dict[str, threading.Thread] = {}

    @classmethod
    def folder(cls, factory) -> Path:
        if cls.base is None:
            cls.base = factory.mktemp("servers")
        return cls.base

    @classmethod
    def get(cls, factory, name: str):
        """(server, its config): the running server ``name``, or one started now with the
        settings made once for the session (`SETTINGS`: its port and folders). A server that
        failed to start fails every test that needs it, with the reason, and is not retried."""
        base = cls.folder(factory)
        start, _ = _service(name)
        with open(base / f"{name}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when closed
            failed, record = base / f"{name}.error", base / f"{name}.json"
            if failed.exists():
                raise RuntimeError(
                    f"the tests' shared {name} server did not start: {failed.read_text()}"
                )
            if record.exists():
                env = json.loads(record.read_text())
            else:
                env = SETTINGS[name](base)
                record.write_text(json.dumps(env))
            cfg = TidemarkConfig.from_env(env)
            try:
                return start(cfg, owner=cls.owner), cfg
            except BaseException as error:
                failed.write_text(f"{type(error).__name__}: {error}")
                raise

    @classmethod
    def early(cls, factory, name: str) -> None:
        """Start ``name`` in a thread of this process now; the tests find it running (or its
        error) when they ask for it."""
        if name in cls.starting:
            return
        cls.folder(factory)

        def start() -> None:
            try:
                cls.get(factory, name)
            except BaseException:  # noqa: BLE001, S110 - recorded by `get` for the tests
                pass

        cls.starting[name] = threading.Thread(target=start, name=f"shared-{name}", daemon=True)
        cls.starting[name].start()

    @classmethod
    def stop(cls) -> None:
        for thread in cls.starting.values():
            thread.join()
        if cls.remote or cls.base is None:
            return
        for record in sorted(cls.base.glob("*.json")):
            _, stop = _service(record.stem)
            stop(TidemarkConfig.from_env(json.loads(record.read_text())))


def pytest_configure_node(node):
    """The controller of `make test`, for each worker: the shared servers' folder and owner."""
    base = _SharedServers.folder(node.config._tmp_path_factory)
    node.workerinput["tidemark_servers"] = [str(base), _SharedServers.owner]


def pytest_xdist_node_collection_finished(node, ids):
    """The controller: start the shared endpoint once a worker collected a test that may use it
    (outside tests/unit; a test marked own_sql is not told apart here)."""
    if any(not i.startswith("tests/unit/") for i in ids):
        _SharedServers.early(node.config._tmp_path_factory, "sql")


def pytest_unconfigure(config):
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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    item.stash[CPU_AT_START] = read_tree()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """Each test's CPU (setup to teardown) in its JUnit report: this worker, its SparkSession's
    JVM and every process the test started while it stays in the worker's tree
    (`tools/cpu_by_process.tree_use`; a server it detaches is not counted); in `make test`
    not the shared servers' (the SQL endpoint's builds, S3, Kafka: the controller's children),
    in a run without workers theirs too. A test whose tree lost a process it had at its start
    (one left running, or ended outside) gets ``cpu_unknown`` naming it, not a figure.
    `tools/test_times.py` sums it per file: seconds of CPU against seconds of wall tell a busy
    test from a waiting one."""
    yield
    start = item.stash.get(CPU_AT_START, None)
    if start is not None:
        use = tree_use(start, read_tree())
        if use.seconds is not None:
            item.user_properties.append(("cpu_seconds", use.seconds))
        else:  # unknown, said so: never a figure that leaves out what it cannot see
            item.user_properties.append(("cpu_unknown", "; ".join(use.lost)[:500]))


def _uses_shared_sql(item) -> bool:
    return item.path.parent.name != "unit" and item.get_closest_marker("own_sql") is None


def pytest_collection_finish(session):
    """One process (no workers): start the shared endpoint now if a test will use it."""
    if not hasattr(session.config, "workerinput") and any(map(_uses_shared_sql, session.items)):
        _SharedServers.early(session.config._tmp_path_factory, "sql")


@pytest.fixture(scope="session")
def shared_sql(tmp_path_factory):
    """One SQL endpoint for the whole session, as a team's own Thrift server that several data
    roots share (TIDEMARK_SQL_ENDPOINT): every test's dbt runs there, in its own schemas
    (TIDEMARK_DBT_SCHEMA_PREFIX) with its tables under its own data root, and no test pays a
    JVM start for dbt (`_SharedServers`)."""
    endpoint, _ = _SharedServers.get(tmp_path_factory, "sql")
    return endpoint


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
    broker, _ = _SharedServers.get(tmp_path_factory, "kafka")
    return broker


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory):
    """The project's own Spark standalone cluster (a master and two workers on 127.0.0.1, a
    free port), one for the session (`_SharedServers`)."""
    cluster, _ = _SharedServers.get(tmp_path_factory, "cluster")
    return cluster


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """The project's own S3-compatible store (SeaweedFS on 127.0.0.1, a free port, its files
    in the session's temporary folder), one for the session (`_SharedServers`): (server, its
    config); built once per machine (its cache is outside the checkout)."""
    return _SharedServers.get(tmp_path_factory, "s3")


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
