"""The one SparkSession factory.

Every Spark setting tidemark relies on is decided in `spark_conf`; `get_spark` starts (or
returns) the process's session with it. The same dictionary feeds dagster-pyspark's
`PySparkResource` and the dbt entry point, so Dagster, the streaming jobs and dbt never disagree
about Delta, the state store or time zones.

Jars: delta-spark's wheel ships no jars, so the Delta (and Kafka) jars are resolved by Spark's
own Ivy from Maven Central at the first start and cached under ``TIDEMARK_JARS_CACHE``
(a Kafka source adds the connector through ``TIDEMARK_EXTRA_PACKAGES``);
`make setup` does that first start, later starts read the cache.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from streaming_jobs.core.locations import Location
from streaming_jobs.core.checkpoints import STATE_MAINTENANCE_SECONDS
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.storage.maven import properties_file

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

SPARK_VERSION = "4.2.0"
# how long a local master waits for its own in-process executor's heartbeat (spark_conf)
LOCAL_HEARTBEAT_TIMEOUT = "3650d"
LOG4J2 = Path(__file__).resolve().with_name("log4j2.properties")
# The Python package is delta-spark 4.4.1, but no 4.4.1 jar for Spark 4.2 is published on
# Maven Central (measured 2026-11-21: delta-spark_4.2_2.13 has only 4.4.0). The two Python
# packages differ only in their version string, so the 4.4.0 jars are the matching JVM side.
DELTA_JAR_VERSION = "4.4.0"
SCALA_BINARY = "2.13"
# delta-spark 4.x publishes one artifact per Spark minor version.
DELTA_PACKAGE = (
    f"io.delta:delta-spark_{SPARK_VERSION.rsplit('.', 1)[0]}_{SCALA_BINARY}:{DELTA_JAR_VERSION}"
)
# Spark's Kafka connector (a stream with source "kafka", `streaming_jobs.storage.kafka`). It depends on
# spark-token-provider-kafka-0-10 at the same version, which some Maven mirrors lack (measured
# 2026-11-21 on this machine's: 404 for 4.2.0, only 4.0.0; on 2026-11-23 4.2.0 resolved). The
# session's resolution excludes it and `kafka_token_provider` adds the jar resolved on its own:
# 4.2.0 where it exists, else 4.0.0 (checked to load and to read and write Kafka with Spark 4.2:
# the classes the connector calls, KafkaConfigUpdater and KafkaTokenUtil, kept their signatures).
KAFKA_PACKAGE = f"org.apache.spark:spark-sql-kafka-0-10_{SCALA_BINARY}:{SPARK_VERSION}"
TOKEN_PROVIDER = f"org.apache.spark:spark-token-provider-kafka-0-10_{SCALA_BINARY}"
TOKEN_PROVIDER_VERSIONS = (SPARK_VERSION, "4.0.0")
# Spark reaches an object store through Hadoop's S3A, whose version must be the Hadoop that
# pyspark ships (hadoop-client-api-3.5.0.jar in pyspark 4.2.0; checked by a unit test).
# hadoop-aws declares the AWS SDK v2 as its 658 MB "bundle"; S3A needs only the SDK's S3, STS
# and transfer-manager modules (13 MB with their dependencies, at the bundle's version), the
# same classes unshaded. Measured 2026-11-29: a stateful stream with its Delta source, sink and
# RocksDB checkpoint on SeaweedFS ran the same on both.
HADOOP_VERSION = "3.5.0"
AWS_SDK_VERSION = "2.35.4"  # what hadoop-aws 3.5.0's POM declares
S3A_PACKAGES = (
    f"org.apache.hadoop:hadoop-aws:{HADOOP_VERSION}",
    *(
        f"software.amazon.awssdk:{m}:{AWS_SDK_VERSION}"
        for m in ("s3", "s3-transfer-manager", "sts")
    ),
)


# Transitive dependencies that Spark 4.2 already ships in a newer version: resolving them
# again only downloads ~60 MB and puts a second copy of the classes on the classpath.
SHIPPED_WITH_SPARK = (
    "org.apache.hadoop:hadoop-client-api",
    "org.apache.hadoop:hadoop-client-runtime",
    "com.fasterxml.jackson.core:jackson-core",
    "com.fasterxml.jackson.core:jackson-annotations",
    "com.fasterxml.jackson.core:jackson-databind",
    "org.apache.parquet:parquet-column",
    "org.apache.parquet:parquet-common",
    "org.apache.parquet:parquet-encoding",
    "org.apache.parquet:parquet-format-structures",
    "org.apache.parquet:parquet-hadoop",
    "org.apache.parquet:parquet-jackson",
    "org.slf4j:slf4j-api",
    "org.apache.logging.log4j:log4j-api",
    "org.apache.logging.log4j:log4j-core",
    "org.apache.logging.log4j:log4j-slf4j2-impl",
    "org.xerial.snappy:snappy-java",
    "com.github.luben:zstd-jni",
    "io.airlift:aircompressor",
    "org.roaringbitmap:RoaringBitmap",
    "org.locationtech.jts:jts-core",
    "com.google.code.findbugs:jsr305",
    # the AWS SDK's: its bundle (the modules S3A uses come on their own), and what Spark ships
    "software.amazon.awssdk:bundle",
    "org.apache.httpcomponents:httpclient",
    "org.apache.httpcomponents:httpcore",
    "commons-codec:commons-codec",
    "commons-logging:commons-logging",
    *(
        f"io.netty:netty-{m}"
        for m in (
            "buffer",
            "codec",
            "codec-http",
            "codec-http2",
            "common",
            "handler",
            "resolver",
            "transport",
            "transport-classes-epoll",
            "transport-native-unix-common",
        )
    ),
)


def packages(cfg: TidemarkConfig) -> tuple[str, ...]:
    return (DELTA_PACKAGE, KAFKA_PACKAGE, *S3A_PACKAGES, *cfg.spark.extra_packages)


def kafka_token_provider(
    cfg: TidemarkConfig, versions: tuple[str, ...] = TOKEN_PROVIDER_VERSIONS
) -> Path:
    """The Kafka token provider's jar, resolved on its own (see `KAFKA_PACKAGE`): the first of
    ``versions`` the repositories have."""
    from streaming_jobs.storage.maven import ResolutionError, resolve

    failures = []
    for version in versions:
        try:
            jars = resolve(
                [f"{TOKEN_PROVIDER}:{version}"],
                cfg.spark.jars_cache / f"token-provider-{version}",
                excludes=(*SHIPPED_WITH_SPARK, "org.apache.kafka:kafka-clients"),
                settings=resolution_settings(cfg),
                downloads=ivy_downloads(cfg),
            )
        except ResolutionError as exc:
            failures.append(str(exc))
            continue
        mine = [j for j in jars if TOKEN_PROVIDER.split(":")[1] in j.name]
        if mine:
            return mine[0]
    raise SparkStartupError(
        "Spark's Kafka connector needs "
        + TOKEN_PROVIDER
        + " at "
        + " or ".join(versions)
        + "; none resolved:\n"
        + "\n".join(failures)
    )


def _manifest_path(cfg: TidemarkConfig) -> Path:
    return cfg.spark.jars_cache / "tidemark-jars.json"


def cached_jars(cfg: TidemarkConfig) -> list[str] | None:
    """The jar files resolved earlier for exactly this package set, if all still exist."""
    try:
        manifest = json.loads(_manifest_path(cfg).read_text())
    except (OSError, ValueError):
        return None
    jars = manifest.get("jars", [])
    if manifest.get("packages") != list(packages(cfg)) or not jars:
        return None
    if not all(Path(j).is_file() for j in jars):
        return None
    return jars


# settings of TIDEMARK_SPARK_CONF that say where and how Ivy resolves (a mirror, its own
# settings file): every resolution gets them, as the session does
IVY_SETTINGS = ("spark.jars.repositories", "spark.jars.ivySettings")


def resolution_settings(cfg: TidemarkConfig) -> dict[str, str]:
    return {k: v for k, v in cfg.spark.extra_conf.items() if k in IVY_SETTINGS}


def ivy_downloads(cfg: TidemarkConfig) -> Path:
    """Ivy's download cache, one per machine (``TIDEMARK_CACHE``), under every jars cache
    (`maven.shared_downloads`): a fresh checkout resolves its jars without downloading them."""
    return cfg.s3.server_cache / "ivy-downloads"


def resolve_packages(cfg: TidemarkConfig) -> list[str]:
    """The session's jar files: `packages` resolved once into the cache (`maven.resolve`: one
    resolution at a time per cache, a transient failure tried again, a module that is missing
    said once) and the Kafka token provider, recorded for `cached_jars`."""
    from streaming_jobs.storage.maven import ResolutionError, resolve

    jars = cached_jars(cfg)
    if jars is not None:
        return jars
    wanted = list(packages(cfg))
    try:
        resolved = resolve(
            wanted,
            cfg.spark.jars_cache,
            excludes=(*SHIPPED_WITH_SPARK, TOKEN_PROVIDER),
            settings=resolution_settings(cfg),
            downloads=ivy_downloads(cfg),
        )
    except ResolutionError as exc:
        raise SparkStartupError(
            f"Spark could not start: the jars {', '.join(wanted)} are not in the cache "
            f"{cfg.spark.jars_cache} and could not be resolved from Maven Central. Check network "
            "access to Maven Central (or name a mirror with "
            "TIDEMARK_SPARK_CONF='spark.jars.repositories=<url>'), then run 'make setup'. "
            f"Ivy's report:\n{exc.report}"
        ) from exc
    # (the token provider first, where Spark put it when it resolved the packages itself)
    jars = [str(kafka_token_provider(cfg)), *(str(j) for j in resolved)]
    _manifest_path(cfg).write_text(json.dumps({"packages": wanted, "jars": jars}, indent=2))
    return jars


def class_archive(cfg: TidemarkConfig, jars: list[str] | None) -> Path | None:
    """Where `build_class_archive` keeps the driver JVM's class-data archive for this Java,
    this Spark and these jars (None before the jars are resolved, or without Java)."""
    import hashlib

    import pyspark

    if not jars:
        return None
    try:
        java = os.path.realpath(check_java())
    except SparkStartupError:
        return None
    key = hashlib.sha256(json.dumps([java, pyspark.__version__, sorted(jars)]).encode())
    return cfg.spark.jars_cache / f"driver-classes-{key.hexdigest()[:16]}.jsa"


def build_class_archive(cfg: TidemarkConfig) -> Path | None:
    """Archive the classes a driver JVM loads to start Spark, open the metastore and read and
    write Delta (Java's class-data sharing: ``-XX:ArchiveClassesAtExit``), once, for every later
    start (`spark_conf`). Run by `tidemark setup` in a JVM of its own on a scratch data root;
    returns the archive, or None (with the reason in ``<jars cache>/driver-classes.log``) when
    it could not be built: Spark then starts as before."""
    import subprocess

    archive = class_archive(cfg, cached_jars(cfg))
    if archive is None or archive.is_file():
        return archive
    partial = archive.with_name(f"{archive.name}.{os.getpid()}.partial")
    log = cfg.spark.jars_cache / "driver-classes.log"
    with tempfile.TemporaryDirectory(prefix="tidemark-classes-") as root:
        env = {
            **os.environ,
            "TIDEMARK_DATA_ROOT": root,
            "TIDEMARK_JARS_CACHE": str(cfg.spark.jars_cache),
        }
        with open(log, "w") as out:
            try:
                done = subprocess.run(
                    [sys.executable, "-m", "streaming_jobs.storage.spark", str(partial)],
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    timeout=900,
                )
            except subprocess.TimeoutExpired:
                out.write("\ntidemark: gave up after 900 s\n")
                done = None
    if done is not None and done.returncode == 0 and partial.is_file():
        partial.replace(archive)  # whole or not at all: a JVM never maps a half-written one
        return archive
    partial.unlink(missing_ok=True)
    return None


def _dump_classes(archive: str) -> None:
    """`build_class_archive`'s JVM: start, use the metastore and Delta, stop, and wait for the
    JVM to write the archive as it exits."""
    from pyspark import SparkContext

    cfg = TidemarkConfig.from_env()
    conf = spark_conf(cfg, hive_metastore=True)
    conf["spark.driver.extraJavaOptions"] += f" -XX:ArchiveClassesAtExit={archive}"
    spark = start_session(cfg, conf)
    spark.sql("show databases").collect()
    table = str(cfg.work_root / "classes")
    spark.range(10).selectExpr("id", "id % 3 as k").write.format("delta").save(table)
    spark.read.format("delta").load(table).groupBy("k").count().collect()
    gateway = SparkContext._gateway
    spark.stop()
    gateway.proc.stdin.close()  # the JVM exits when its stdin closes, and writes the archive
    gateway.proc.wait(timeout=600)


class SparkStartupError(RuntimeError):
    """Spark could not start; the message says what to install or fix."""


# the settings by which Spark resolves `packages` itself, left out once tidemark has resolved them
RESOLUTION_SETTINGS = ("spark.jars.packages", "spark.jars.excludes", "spark.jars.ivy")


def spark_conf(cfg: TidemarkConfig, *, hive_metastore: bool = False) -> dict[str, str]:
    """All Spark settings for a tidemark process.

    ``hive_metastore`` is for the dbt process only: dbt needs a persistent catalog for its
    models, and exactly one JVM at a time may open the embedded Derby metastore, so the
    streaming/Dagster JVM keeps an in-memory catalog and addresses Delta tables by path.
    """
    paths = cfg.paths
    conf = {
        "spark.master": cfg.spark.master,
        "spark.app.name": "tidemark",
        "spark.jars.packages": ",".join(packages(cfg)),
        "spark.jars.excludes": ",".join((*SHIPPED_WITH_SPARK, TOKEN_PROVIDER)),
        "spark.jars.ivy": str(cfg.spark.jars_cache),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        # RocksDB keeps state off the JVM heap; changelog checkpointing uploads only the
        # changes of each batch instead of a full snapshot, so commits stay short.
        "spark.sql.streaming.stateStore.providerClass": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        # A stream-stream join's state stays on Spark's default format (2: four stores per
        # partition). Format 3 (one store, its four parts column families) made a batch of a
        # handful of rows commit faster, but the join at 1 M events per stream 10 to 20 % slower
        # (docs/benchmarks.md). A checkpoint begun on 3 goes on with it: Spark keeps the format
        # in the checkpoint's offsets, and `tidemark state` reads both.
        # A store's snapshot is made at a commit (every minDeltasForSnapshot versions) but
        # uploaded by the state store's maintenance thread; a run that ends first loses it, and
        # the next run replays every changelog since the last uploaded one. Every 10 s instead of
        # 60 s, and each incremental run waits for its own (runner.py, settle_snapshots).
        "spark.sql.streaming.stateStore.maintenanceInterval": f"{STATE_MAINTENANCE_SECONDS}s",
        # RocksDB's memory (block cache, memtables, index and filter blocks) is native, outside
        # the heap: without a bound, every store of every job grows its own and the process's
        # resident set keeps rising in a long continuous run. One shared, bounded budget instead
        # (docs/reliability.md, the soak); a job with more state may raise it in TIDEMARK_SPARK_CONF.
        "spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage": "true",
        "spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB": "512",
        # Spark 4.2's checkpoint hardening that is on by default, pinned (docs/reliability.md): a
        # bad state snapshot is skipped and rebuilt from the changelog (counted, and surfaced
        # as the state_repaired finding); every state store must commit, even in foreachBatch;
        # state formats and checkpoint metadata are validated when a query starts.
        "spark.sql.streaming.stateStore.autoSnapshotRepair.enabled": "true",
        "spark.sql.streaming.stateStore.commitValidation.enabled": "true",
        "spark.sql.streaming.stateStore.formatValidation.enabled": "true",
        "spark.sql.streaming.checkpoint.verifyMetadataExists.enabled": "true",
        # Parquet timestamps in microseconds, not Spark's legacy INT96 (nanoseconds): delta-rs
        # and pyarrow read INT96 as nanoseconds, which overflow before 1677 (a year-0001 event
        # kept in bronze made the table unreadable there)
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        # An ingestion batch is cached once parsed (its counts, then bronze's and quarantine's
        # writes read it) and dropped after its commit: uncompressed, the cache costs about
        # 0.7 s per million lines over the parse, compressed 2 to 2.5 s
        # (tools/benchmarks/ingestion_profile.py). Memory is bounded by the batch's size, and
        # a cache that does not fit spills to disk.
        "spark.sql.inMemoryColumnarStorage.compressed": "false",
        # Two cores: 200 default shuffle partitions would mean 200 state stores per operator.
        "spark.sql.shuffle.partitions": str(cfg.spark.shuffle_partitions),
        "spark.default.parallelism": str(cfg.spark.shuffle_partitions),
        # The Spark UI binds to SPARK_LOCAL_IP (set to loopback in `start_session`; there is no
        # spark.ui.bindAddress); the driver's RPC to spark.driver.bindAddress.
        "spark.ui.enabled": "true" if cfg.spark.ui_enabled else "false",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
        # Event times are UTC everywhere: generator, stream, dbt and recon agree on windows.
        "spark.sql.session.timeZone": "UTC",
        # UTC; Derby's home under the data root; tidemark's logging (log4j2.properties: the
        # terminal gets errors only, warnings go to <data root>/logs/spark.log)
        "spark.driver.extraJavaOptions": (
            f"-Duser.timezone=UTC -Dderby.system.home={paths.dbt} "
            f"-Dlog4j2.configurationFile={LOG4J2} -Dtidemark.logs={paths.logs}"
        ),
        "spark.driver.memory": "4g",
        "spark.sql.warehouse.dir": Location.of(paths.warehouse).spark,
        # Late-event filtering and the dropped-row metric must be exact for reconciliation.
        "spark.sql.streaming.statefulOperator.allowMultiple": "true",
        "spark.sql.streaming.numRecentProgressUpdates": "1000",
        "spark.databricks.delta.schema.autoMerge.enabled": "false",
        # a job's output may hold arrays of structs whose fields Spark marks NOT NULL (e.g.
        # collect_list(struct(count(*), ...))); Delta cannot enforce NOT NULL inside arrays and
        # would refuse the table: keep the column, leave that nested constraint unenforced
        "spark.databricks.delta.constraints.allowUnenforcedNotNull.enabled": "true",
        # Delta rebuilds a table's state from its log (one Spark job per new snapshot: each
        # write, each read of a changed table) with 50 tasks by default. tidemark's logs hold
        # thousands of files at most, and every task pays the same fixed cost: it generates
        # projections for Delta's whole action schema. One task is the cheapest (docs/benchmarks.md,
        # "The build's fixed cost"); a table with a very long log may raise it in
        # TIDEMARK_SPARK_CONF.
        "spark.databricks.delta.snapshotPartitions": "1",
        "spark.ui.showConsoleProgress": "false",
        # data source options shown in plans, the UI and logs: Kafka credentials
        # (TIDEMARK_KAFKA_CONF, e.g. kafka.sasl.jaas.config) are redacted, as URLs are by default
        "spark.sql.redaction.options.regex": "(?i)url|password|secret|token|jaas|sasl|ssl",
        # Tables with delta.autoOptimize.autoCompact (the lake ETL jobs) bin-pack a partition
        # once it holds this many small files (Delta's default, 50, is hours of micro-batches).
        "spark.databricks.delta.autoCompact.minNumFiles": "10",
        # Python workers (transformWithState, UDFs) run this interpreter, the one with pandas and
        # pyarrow installed; otherwise Spark starts whatever `python3` is first on PATH.
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
    }
    if hive_metastore:
        conf.update(
            {
                # Projections, orderings and window frames stay generated code (Spark's default).
                # Interpreting them (spark.sql.codegen.factoryMode=NO_CODEGEN) made a small build
                # faster but a full reconciliation of 5 M events 1.7 times as long: sorts,
                # joins and windows outside whole-stage code run interpreted (docs/benchmarks.md).
                "spark.sql.catalogImplementation": "hive",
                "spark.hadoop.javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={paths.dbt / 'metastore_db'};create=true",
                "spark.hadoop.datanucleus.schema.autoCreateAll": "true",
                "spark.hadoop.hive.metastore.schema.verification": "false",
            }
        )
    else:
        conf["spark.sql.catalogImplementation"] = "in-memory"
    if cfg.spark.master == "local" or cfg.spark.master.startswith("local["):
        # The executor lives in the driver's JVM, so its heartbeats can only stop when the whole
        # process is paused: a host or VM frozen, a laptop asleep, a long GC, SIGSTOP. Past
        # spark.network.timeout (120 s) the driver would then drop its own executor, which
        # cannot register again in local mode, and ten minutes later the executor ends the JVM
        # (every query and the session with it; seen in CI after a 168 s freeze of the host).
        # Never expire it: a paused process carries on where it stopped.
        conf["spark.storage.blockManagerHeartbeatTimeoutMs"] = LOCAL_HEARTBEAT_TIMEOUT
    if cfg.spark.master.startswith("spark://"):
        conf.update(cluster_conf(cfg))
    jars = cached_jars(cfg)
    archive = class_archive(cfg, jars)
    if archive is not None and archive.is_file():
        # The driver JVM maps the classes `tidemark setup` archived (`build_class_archive`)
        # instead of loading and verifying them again: about 8 s less per start (docs/benchmarks.md).
        # A JVM or class path the archive does not fit ignores it, silently, and loads as before.
        conf["spark.driver.extraJavaOptions"] += (
            f" -XX:SharedArchiveFile={archive} -Xlog:cds=off -Xlog:cds+dynamic=off"
        )
    if jars:
        # Resolved before: hand Spark the files and skip Ivy (3-4 s per start, and offline).
        for key in RESOLUTION_SETTINGS:
            conf.pop(key)
        conf["spark.jars"] = ",".join(jars)
    conf.update(cfg.spark.extra_conf)
    return conf


def cluster_conf(cfg: TidemarkConfig) -> dict[str, str]:
    """What executors in JVMs of their own (a standalone cluster's workers) need that local mode
    has from the driver's process; every key may be overridden in TIDEMARK_SPARK_CONF."""
    checkout = Path(__file__).resolve().parents[2]
    python_path = [
        str(checkout),
        *(str(p) for p in cfg.jobs_path),
        *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep)),
    ]
    return {
        # event time is UTC in every JVM, not only the driver's
        "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
        # an application takes two one-core executors (one per worker of the project's
        # cluster): several applications run at once, none waits for cores held by another
        "spark.cores.max": "2",
        "spark.executor.cores": "1",
        "spark.executor.memory": "1g",
        # the executors' Python workers import tidemark's stateful processors and your job
        # files, as the driver does (on a cluster of other machines: the same paths there, or
        # the project shipped with spark.submit.pyFiles; docs/running-at-scale.md)
        "spark.executorEnv.PYTHONPATH": os.pathsep.join(dict.fromkeys(python_path)),
        "spark.executorEnv.MALLOC_ARENA_MAX": "2",
    }


def s3a_settings(cfg: TidemarkConfig) -> dict[str, str]:
    """Hadoop S3A's settings for ``cfg``'s object store (`streaming_jobs.core.stores` has
    the same store for Python): endpoint, region, path style, and the keys."""
    from streaming_jobs.core.stores import keys

    signed = keys(cfg)
    return {
        "fs.s3a.endpoint": cfg.s3.endpoint.rstrip("/"),
        "fs.s3a.endpoint.region": cfg.s3.region,
        "fs.s3a.path.style.access": "true" if cfg.s3.path_style else "false",
        "fs.s3a.connection.ssl.enabled": "true" if cfg.s3.endpoint.startswith("https") else "false",
        # SimpleAWSCredentialsProvider reads these two; nothing else in the chain is tried
        "fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        "fs.s3a.access.key": signed.access_key_id,
        "fs.s3a.secret.key": signed.secret_access_key,
    }


def use_object_store(spark, cfg: TidemarkConfig) -> None:
    """Point the session's S3A at ``cfg``'s object store: ``s3a://bucket/...`` paths then work
    for tables, streams and checkpoints, on the driver and (the Hadoop configuration travels
    with each task) on executors.

    Set on the running context's Hadoop configuration, not in Spark's conf: the keys stay out of
    the Spark UI's environment page, the event log and every plan. Set before the first use of a
    bucket: Hadoop caches a bucket's file system with the settings it was made with.
    """
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in s3a_settings(cfg).items():
        hadoop.set(key, value)


def check_java() -> str:
    """Return the java executable Spark will use, or explain how to get one."""
    java_home = os.environ.get("JAVA_HOME")
    candidate = Path(java_home) / "bin" / "java" if java_home else None
    if candidate and candidate.exists():
        return str(candidate)
    found = shutil.which("java")
    if found:
        return found
    raise SparkStartupError(
        "Spark needs Java 17 and none was found (no JAVA_HOME, no 'java' on PATH). "
        "Install it (Debian/Ubuntu: 'apt-get install openjdk-17-jre-headless') and run again."
    )


def get_spark(cfg: TidemarkConfig, *, hive_metastore: bool = False):
    """Start or return this process's SparkSession, configured by `spark_conf`."""
    return start_session(cfg, spark_conf(cfg, hive_metastore=hive_metastore))


# Spark's own default, kept: settings whose key or value looks like a credential
SPARK_REDACTION = r"(?i)secret|password|token|access[.]?key"


def redaction_regex(private: dict[str, str]) -> str:
    """Spark's redaction pattern (or the one given in ``private``) plus its exact keys."""
    keys = "|".join(re.escape(k) for k in sorted(private))
    return f"{private.get('spark.redaction.regex', SPARK_REDACTION)}|^(?:{keys})$"


def start_session(cfg: TidemarkConfig, conf: dict[str, str]):
    """Start (or return the running) session with ``conf``; explain failures to the user."""
    check_java()
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        if cfg.on_store:
            use_object_store(active, cfg)
        return active
    # TIDEMARK_SPARK_CONF may hold credentials: its values never reach the JVM's command line
    # (PySpark passes builder settings as --conf arguments, readable by every local user) but a
    # private properties file, and Spark redacts them in its UI, event logs and errors.
    if "spark.jars.packages" in conf:  # the first start: the jars resolved here, then cached
        jars = resolve_packages(cfg)
        conf = {k: v for k, v in conf.items() if k not in RESOLUTION_SETTINGS}
        conf["spark.jars"] = ",".join(filter(None, (conf.get("spark.jars"), *jars)))
    private = {k: conf[k] for k in cfg.spark.extra_conf if k in conf}
    launch = {k: v for k, v in conf.items() if k not in private}
    if private:
        launch["spark.redaction.regex"] = redaction_regex(private)
    builder = SparkSession.builder
    for key, value in launch.items():
        builder = builder.config(key, value)
    # PySpark takes the Python workers' interpreter from the environment when the context starts
    # (the conf above covers executors on a cluster); without pandas there, transformWithState fails.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # Spark's web UI listens on SPARK_LOCAL_IP, or on every interface without it: loopback,
    # unless the driver is made reachable on purpose (spark.driver.host overridden for a
    # remote master in TIDEMARK_SPARK_CONF, or SPARK_LOCAL_IP set by the user).
    if conf.get("spark.driver.host", "127.0.0.1") in ("127.0.0.1", "localhost"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # glibc gives each thread that allocates its own malloc arena (up to 8 per core); with
    # RocksDB's native threads and Netty that is resident memory that is never given back. Two
    # arenas keep a long-running JVM's resident set level (docs/reliability.md, the soak).
    os.environ.setdefault("MALLOC_ARENA_MAX", "2")
    cfg.spark.jars_cache.mkdir(parents=True, exist_ok=True)
    cfg.paths.dbt.mkdir(parents=True, exist_ok=True)  # derby.system.home
    cfg.paths.logs.mkdir(parents=True, exist_ok=True)  # spark.log
    properties = properties_file(private) if private else None
    submit_args = os.environ.get("PYSPARK_SUBMIT_ARGS")
    if properties:
        os.environ["PYSPARK_SUBMIT_ARGS"] = (
            f"--properties-file {shlex.quote(properties)} {submit_args or 'pyspark-shell'}"
        )
    try:
        spark = builder.getOrCreate()
    except Exception as exc:  # noqa: BLE001 - re-raised with what to do
        raise SparkStartupError(f"Spark could not start: {exc}") from exc
    finally:
        if properties:  # read when the JVM started; gone now
            os.unlink(properties)
            if submit_args is None:
                os.environ.pop("PYSPARK_SUBMIT_ARGS", None)
            else:
                os.environ["PYSPARK_SUBMIT_ARGS"] = submit_args
    spark.sparkContext.setLogLevel("WARN")
    if cfg.on_store:
        use_object_store(spark, cfg)
    return spark


if __name__ == "__main__":
    _dump_classes(sys.argv[1])


@contextmanager
def session_settings(spark, settings: dict[str, str]):
    """``settings`` on ``spark``'s session for the block, the session's own values (or none)
    back afterwards: a process's session is shared (a test session, a Dagster process)."""
    previous = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def without_adaptive_plans(batch: DataFrame) -> None:
    """Plan this micro-batch's queries whole, without adaptive execution.

    Spark gives each ``foreachBatch`` call a session of its own with adaptive execution on
    (a streaming query runs without it). Adaptive execution runs each stage of a plan as a
    Spark job and plans the next from its result: in ingestion, the duplicate-payload check's
    two aggregations took 4 jobs, and Delta's lookup of the table's state before the append 3,
    each with its fixed cost. Without it a batch of a handful of lines runs 3 Spark jobs
    instead of 8. At the batch's size there is nothing for it to adapt: the shuffles have the
    lake's few partitions, and the one join (keys in conflict) is a broadcast already."""
    batch.sparkSession.conf.set("spark.sql.adaptive.enabled", "false")
