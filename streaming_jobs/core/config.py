"""Typed settings for tidemark, built once from the environment.

Every path a run writes lives under one data root (``TIDEMARK_DATA_ROOT``, default
``<checkout>/.tidemark/data``, git-ignored). `Paths` is the single map of that tree, so no
module invents a location of its own.

Environment variables (all optional):

- ``TIDEMARK_DATA_ROOT``        the data root: a local folder, or ``s3://bucket/prefix``
- ``TIDEMARK_WORK_DIR``         with a data root on a store: the local folder of this machine's
  working state (logs, Dagster's home, dbt's metastore and target; default
  ``<checkout>/.tidemark/work/<bucket>/<prefix>``)
- ``TIDEMARK_SPARK_MASTER``     Spark master URL (default ``local[2]``)
- ``TIDEMARK_SPARK_CONF``       extra Spark settings, ``key=value`` pairs separated by ``;``
- ``TIDEMARK_SPARK_UI``         ``1`` to start the Spark UI (off by default)
- ``TIDEMARK_JARS_CACHE``       where resolved jars are cached (default ``<checkout>/.tidemark/ivy``)
- ``TIDEMARK_EXTRA_PACKAGES``   more Maven coordinates for Spark, comma-separated (e.g. Kafka)
- ``TIDEMARK_SHUFFLE_PARTITIONS`` shuffle partitions (default: one per core of a local master,
  2 on ``local[2]``; 4 on a cluster)
- ``TIDEMARK_RECON_CRON``       when the reconciliation schedule runs (default hourly, UTC)
- ``TIDEMARK_SAVEPOINT_CRON``   when savepoints of every job are taken (default hourly at :30)
- ``TIDEMARK_SAVEPOINTS_KEEP``  savepoints kept per job (default 3)
- ``TIDEMARK_STALL_SECONDS``    a batch in flight longer than this is stalled (default 900)
- ``TIDEMARK_IDLE_SECONDS``     no commit for this long while the source has data (default 3600)
- ``TIDEMARK_GROWTH_HORIZON_HOURS`` warn when state reaches critical within this (default 6)
- ``TIDEMARK_RESTART_ATTEMPTS`` restarts of a failed streaming run before giving up (default 3)
- ``TIDEMARK_RESTART_BACKOFF_SECONDS`` wait before the first restart; doubles each time (default 15)
- ``TIDEMARK_MAX_CONCURRENT_RUNS`` runs the Dagster instance runs at once (default 8)
- ``TIDEMARK_LATE_SHARE``       share of rows dropped as late that raises late_share (default 0.5)
- ``TIDEMARK_WATERMARK_AHEAD_SECONDS`` a watermark this far past the clock is critical (86400)
- ``TIDEMARK_MIN_FREE_GB``      free space on the data root's disk that is critical below (2)
- ``TIDEMARK_SQL_PORT``         the SQL endpoint's port on 127.0.0.1 (default 10000)
- ``TIDEMARK_SQL_MEMORY``       the SQL endpoint's driver memory (default 3g)
- ``TIDEMARK_ALERT_WEBHOOK_URL`` / ``TIDEMARK_ALERT_WEBHOOK_TOKEN`` where alerts are POSTed
  (read at delivery time only, never stored or logged; see `operations.alerts`)
- ``TIDEMARK_ALERT_RETRY_SECONDS`` first backoff of a failed alert delivery (default 30)
- ``TIDEMARK_JOBS_PATH``        folders of your own jobs and streams, separated by ``:``
- ``TIDEMARK_DBT_TARGET``       where dbt runs: auto (default), endpoint or session
- ``TIDEMARK_SQL_ENDPOINT``     host:port of a Thrift server of your own, shared by data roots
- ``TIDEMARK_DBT_SCHEMA_PREFIX`` this data root's dbt schemas are <prefix>recon, ... (required
  with ``TIDEMARK_SQL_ENDPOINT``)
- ``TIDEMARK_UNBOUNDED_STATE``  a job whose state is never evicted: refuse (default) or warn
- ``TIDEMARK_SOURCE``           where streams read from unless they say: landing (default) or kafka
- ``TIDEMARK_KAFKA_PORT``       the project's own broker's port on 127.0.0.1 (default 9092)
- ``TIDEMARK_KAFKA_BOOTSTRAP``  the brokers streams read (default 127.0.0.1:<that port>)
- ``TIDEMARK_KAFKA_TOPIC_PREFIX`` a stream's topic is <prefix><stream> (default ``tidemark.``)
- ``TIDEMARK_KAFKA_PARTITIONS`` partitions of the topics tidemark creates (default 3)
- ``TIDEMARK_KAFKA_STARTING_OFFSETS`` where a new checkpoint starts: earliest (default) or latest
- ``TIDEMARK_KAFKA_MAX_OFFSETS_PER_TRIGGER`` records one micro-batch reads at most (default all)
- ``TIDEMARK_KAFKA_LAG_ROWS`` / ``TIDEMARK_KAFKA_LAG_SECONDS`` consumer lag that raises
  consumer_lag (default 100000 records / 900 s since the oldest unread record was written)
- ``TIDEMARK_KAFKA_CONF``       Kafka client settings for Spark, ``key=value;...`` (security:
  ``security.protocol``, ``sasl.*``, ``ssl.*``), passed as ``kafka.<key>``; never logged
- ``TIDEMARK_KAFKA_CLIENT_CONF`` the same for tidemark's Python client (generator, lag), in
  librdkafka's names; never logged
- ``TIDEMARK_CLUSTER_PORT``     the project's own Spark cluster's master port (default 7077)
- ``TIDEMARK_CLUSTER_WORKERS`` / ``TIDEMARK_CLUSTER_WORKER_CORES`` /
  ``TIDEMARK_CLUSTER_WORKER_MEMORY`` its workers (default 2, offering 4 cores and 6g each)
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from streaming_jobs.core.locations import Location, Where
from streaming_jobs.core.parsing import ConfigError
from streaming_jobs.core.parsing import number as _number
from streaming_jobs.core.store_settings import ObjectStoreSettings, _object_store_settings

CHECKOUT = Path(__file__).resolve().parents[2]


def default_results(name: str) -> Path:
    """Where a benchmark, the chaos harness or the soak writes its JSON unless told: the data
    root's ``results/`` (created). The committed evidence under the checkout's ``results/`` is
    only ever updated by naming it (``--results results/<name>``)."""
    folder = TidemarkConfig.from_env().work_root / "results"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / name


DEFAULT_HOME = CHECKOUT / ".tidemark"


_VARIABLE = re.compile(r"^(TIDEMARK_[A-Z_]+)")
# Set in a long-running process (the Dagster code location): see `tolerate_bad_settings`.
_TOLERANT = False
_PROBLEMS: dict[str, str] = {}


def tolerate_bad_settings(on: bool = True) -> None:
    """From now on in this process, `TidemarkConfig.from_env` reading the real environment
    removes a malformed variable from it (so it takes its default here and in every process
    started from here) instead of raising, and `setting_problems` names it (the health sensor
    alerts on each): one bad variable must not stop every sensor and alert. The command line
    stays strict: one clear message, nothing runs."""
    global _TOLERANT
    _TOLERANT = on
    if not on:
        _PROBLEMS.clear()


def setting_problems() -> dict[str, str]:
    """Variable -> what is wrong with it, for the settings this process runs with their
    defaults (see `tolerate_bad_settings`)."""
    return dict(_PROBLEMS)


def _parse_spark_conf(raw: str, name: str = "TIDEMARK_SPARK_CONF") -> dict[str, str]:
    """``key=value;key=value`` settings (a variable that may hold credentials)."""
    conf: dict[str, str] = {}
    for number, item in enumerate(filter(None, (part.strip() for part in raw.split(";"))), 1):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            # the text is not repeated: it may be a credential
            raise ConfigError(
                f"{name}: cannot read its setting number {number} (no 'key=value'); "
                "write settings as 'key=value;other.key=value'"
            )
        conf[key.strip()] = value.strip()
    return conf


@dataclass(frozen=True)
class Paths:
    """The layout of one data root. The data (landing, lake, checkpoints, savepoints, the dbt
    tables) lives under ``root``: a local `Path`, or a `Location` on an object store. This
    machine's working state (logs, Dagster's home, dbt's metastore and target) lives under
    ``work``, always local: the same folder as ``root`` when that is local."""

    root: Where
    work: Path | None = None
    # jobs whose checkpoint and gold table are read from their rebuild's shadow (a
    # reconciliation of the new version before it is swapped in, `with_shadow`)
    shadowed: tuple[str, ...] = ()

    @property
    def _work(self) -> Path:
        return self.work if self.work is not None else self.root  # type: ignore[return-value]

    @property
    def landing(self) -> Where:
        return self.root / "landing"

    @property
    def lake(self) -> Where:
        return self.root / "lake"

    @property
    def checkpoints(self) -> Where:
        return self.root / "checkpoints"

    @property
    def savepoints(self) -> Where:
        return self.root / "savepoints"

    @property
    def rebuilds(self) -> Where:
        """Rebuilds beside the live jobs: each job's shadow and its previous version."""
        return self.root / "rebuilds"

    @property
    def dbt(self) -> Path:
        """dbt's own state: Derby metastore, target, logs (local)."""
        return self._work / "dbt"

    @property
    def warehouse(self) -> Where:
        """Where dbt's models are stored (spark.sql.warehouse.dir), with the data."""
        return self.root / "dbt" / "warehouse"

    @property
    def dagster_home(self) -> Path:
        return self._work / "dagster_home"

    @property
    def logs(self) -> Path:
        """Full logs of long commands and background services (the terminal gets a summary)."""
        return self._work / "logs"

    def dbt_table(self, schema: str, name: str) -> Where:
        """A dbt model materialized as a Delta table, e.g. dbt_table('recon', 'recon_summary')."""
        return self.warehouse / f"{schema}.db" / name

    def landing_dir(self, stream: str) -> Where:
        return self.landing / stream

    def shadow(self, job: str) -> Where:
        """``rebuilds/<job>/shadow/``: a new version of the job built beside the live one."""
        return self.rebuilds / job / "shadow"

    def table(self, layer: str, name: str) -> Where:
        """A lake table: layer is bronze, quarantine, gold or ops."""
        if layer == "gold" and name in self.shadowed:
            return self.shadow(name) / "gold"
        return self.lake / layer / name

    def checkpoint(self, name: str) -> Where:
        if name in self.shadowed:
            return self.shadow(name) / "checkpoint"
        return self.checkpoints / name


DEFAULT_MASTER = "local[2]"
_LOCAL_MASTER = re.compile(r"local(?:\[(\d+|\*)(?:,\s*\d+)?\])?$")


def default_partitions(master: str) -> int:
    """Shuffle partitions (and so each stateful operator's state partitions, fixed by a job's
    first checkpoint) when none is set: one per core of a local master (``local[2]``: 2). Every
    partition's state store is loaded, committed and uploaded on each batch, so more partitions
    than cores cost a tiny batch time and buy nothing; on a cluster, whose cores are not known
    here, 4."""
    local = _LOCAL_MASTER.match(master.strip())
    if not local:
        return 4
    cores = local.group(1)
    if cores is None:
        return 1
    if cores == "*":
        return os.cpu_count() or 1
    return max(1, int(cores))


@dataclass(frozen=True)
class SparkSettings:
    master: str = DEFAULT_MASTER
    shuffle_partitions: int = default_partitions(DEFAULT_MASTER)
    ui_enabled: bool = False
    jars_cache: Path = DEFAULT_HOME / "ivy"
    extra_packages: tuple[str, ...] = ()
    # TIDEMARK_SPARK_CONF: may hold credentials, so kept out of repr (logs, errors, the UI)
    extra_conf: dict[str, str] = field(default_factory=dict, repr=False)


def _parse_date(name: str, raw: str) -> str:
    """A calendar day written YYYY-MM-DD, or a `ConfigError` naming the variable."""
    from datetime import date

    try:
        return date.fromisoformat(raw.strip()).isoformat()
    except ValueError:
        raise ConfigError(
            f"{name}={raw!r} is not a day written YYYY-MM-DD (e.g. 2025-01-01)"
        ) from None


def _parse_cron(raw: str, name: str = "TIDEMARK_RECON_CRON") -> str:
    fields = raw.split()
    if len(fields) != 5:
        raise ConfigError(
            f"{name}={raw!r} is not a cron string; write five fields, e.g. "
            "'0 * * * *' (hourly) or '*/15 * * * *' (every 15 minutes)"
        )
    return " ".join(fields)


@dataclass(frozen=True)
class OpsSettings:
    """Operating limits: sensors, savepoints, restarts."""

    savepoint_cron: str = "30 * * * *"
    savepoints_keep: int = 3
    stall_seconds: float = 900.0
    idle_seconds: float = 3600.0
    growth_horizon_hours: float = 6.0
    restart_attempts: int = 3
    # a chain's first restart is at once (a killed run's locks are free at once; a lease held
    # elsewhere is waited out by the restart itself); the n-th waits this x 2^(n-2)
    restart_backoff_seconds: float = 15.0
    max_concurrent_runs: int = 8  # the Dagster instance's cap (what conflicts is limited apart)
    late_share: float = 0.5  # share of rows dropped as late over recent batches that warns
    watermark_ahead_seconds: float = 86400.0  # a watermark this far past the clock is critical
    min_free_gb: float = 2.0  # free space on the data root's disk below this is critical
    # retention (streaming_jobs/operations/retention.py)
    maintenance_cron: str = "45 2 * * *"
    vacuum_retain_hours: float = 168.0  # removed files VACUUM keeps, at least
    log_retain_hours: float = 168.0  # Delta log entries (time travel) kept, at least
    ops_retention_days: float = 30.0  # ops rows, archived landing files, replaced checkpoints
    landing_retention: str = "archive"  # ingested landing files: archive, delete or keep

    def restart_wait(self, attempt: int) -> float:
        """Seconds from a failure to a chain's ``attempt``-th restart: 0 for the first."""
        return 0.0 if attempt <= 1 else self.restart_backoff_seconds * 2 ** (attempt - 2)


def _fraction(env: dict, name: str, default: float) -> float:
    value = _number(env, name, default)
    if value > 1:
        raise ConfigError(f"{name}={env[name]!r} is a share: a number from 0 to 1")
    return value


def _ops_settings(env: dict) -> OpsSettings:
    d = OpsSettings()
    return OpsSettings(
        savepoint_cron=_parse_cron(
            env.get("TIDEMARK_SAVEPOINT_CRON", d.savepoint_cron), "TIDEMARK_SAVEPOINT_CRON"
        ),
        savepoints_keep=_number(env, "TIDEMARK_SAVEPOINTS_KEEP", d.savepoints_keep, int, 1),
        stall_seconds=_number(env, "TIDEMARK_STALL_SECONDS", d.stall_seconds, minimum=1),
        idle_seconds=_number(env, "TIDEMARK_IDLE_SECONDS", d.idle_seconds, minimum=1),
        growth_horizon_hours=_number(env, "TIDEMARK_GROWTH_HORIZON_HOURS", d.growth_horizon_hours),
        restart_attempts=_number(env, "TIDEMARK_RESTART_ATTEMPTS", d.restart_attempts, int),
        restart_backoff_seconds=_number(
            env, "TIDEMARK_RESTART_BACKOFF_SECONDS", d.restart_backoff_seconds
        ),
        max_concurrent_runs=_number(
            env, "TIDEMARK_MAX_CONCURRENT_RUNS", d.max_concurrent_runs, int, 1
        ),
        late_share=_fraction(env, "TIDEMARK_LATE_SHARE", d.late_share),
        watermark_ahead_seconds=_number(
            env, "TIDEMARK_WATERMARK_AHEAD_SECONDS", d.watermark_ahead_seconds, minimum=60
        ),
        min_free_gb=_number(env, "TIDEMARK_MIN_FREE_GB", d.min_free_gb),
        maintenance_cron=_parse_cron(
            env.get("TIDEMARK_MAINTENANCE_CRON", d.maintenance_cron), "TIDEMARK_MAINTENANCE_CRON"
        ),
        vacuum_retain_hours=_number(env, "TIDEMARK_VACUUM_RETAIN_HOURS", d.vacuum_retain_hours),
        log_retain_hours=_number(env, "TIDEMARK_LOG_RETAIN_HOURS", d.log_retain_hours),
        ops_retention_days=_number(env, "TIDEMARK_OPS_RETENTION_DAYS", d.ops_retention_days),
        landing_retention=_choice(
            env, "TIDEMARK_LANDING_RETENTION", d.landing_retention, ("archive", "delete", "keep")
        ),
    )


def _choice(env: dict, name: str, default: str, choices: tuple[str, ...]) -> str:
    value = env.get(name, default).strip().lower()
    if value not in choices:
        raise ConfigError(f"{name}={env[name]!r} is not one of {', '.join(choices)}")
    return value


DBT_TARGETS = ("auto", "endpoint", "session")


@dataclass(frozen=True)
class SqlEndpointSettings:
    """The SQL endpoint dbt talks to (Spark's Thrift server, always on 127.0.0.1)."""

    port: int = 10000
    driver_memory: str = "3g"
    dbt_target: str = "auto"  # where dbt runs: the endpoint, a session of its own, or auto
    # a Thrift server of your own that several data roots share ("host:port"), instead of the
    # data root's own endpoint; each data root names its dbt schemas with its own prefix
    shared: str | None = None
    schema_prefix: str = ""

    @property
    def shared_address(self) -> tuple[str, int] | None:
        if not self.shared:
            return None
        host, _, port = self.shared.rpartition(":")
        return host, int(port)


def _sql_settings(env: dict) -> SqlEndpointSettings:
    d = SqlEndpointSettings()
    port = _number(env, "TIDEMARK_SQL_PORT", d.port, int, 1)
    if not 1 <= port <= 65535:
        raise ConfigError(f"TIDEMARK_SQL_PORT={port} is not a TCP port (1-65535)")
    target = env.get("TIDEMARK_DBT_TARGET", d.dbt_target)
    if target not in DBT_TARGETS:
        raise ConfigError(f"TIDEMARK_DBT_TARGET={target!r}: use one of {', '.join(DBT_TARGETS)}")
    shared = env.get("TIDEMARK_SQL_ENDPOINT") or None
    prefix = env.get("TIDEMARK_DBT_SCHEMA_PREFIX", d.schema_prefix)
    if shared is not None:
        host, _, shared_port = shared.rpartition(":")
        if not host or not shared_port.isdigit() or not 1 <= int(shared_port) <= 65535:
            raise ConfigError(
                f"TIDEMARK_SQL_ENDPOINT={shared!r} is not host:port (e.g. thrift.internal:10000)"
            )
        if not prefix:
            raise ConfigError(
                f"TIDEMARK_SQL_ENDPOINT={shared} is a SQL endpoint several data roots share: set "
                "TIDEMARK_DBT_SCHEMA_PREFIX to a prefix of this data root's own (e.g. team_a_), "
                "so its dbt schemas do not replace another's"
            )
    if prefix and not re.fullmatch(r"[a-z][a-z0-9_]*", prefix):
        raise ConfigError(
            f"TIDEMARK_DBT_SCHEMA_PREFIX={prefix!r}: use lower-case letters, digits and _, "
            "starting with a letter"
        )
    return SqlEndpointSettings(
        port=port,
        dbt_target=target,
        driver_memory=env.get("TIDEMARK_SQL_MEMORY", d.driver_memory),
        shared=shared,
        schema_prefix=prefix,
    )


@dataclass(frozen=True)
class AlertSettings:
    """Where alerts go. The URL and token are secrets: kept out of repr (and so out of logs),
    never stored; read from the environment when alerts are sent."""

    url: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    retry_seconds: float = 30.0  # first backoff of a failed delivery; doubles per attempt


def _alert_settings(env: dict) -> AlertSettings:
    return AlertSettings(
        url=env.get("TIDEMARK_ALERT_WEBHOOK_URL") or None,
        token=env.get("TIDEMARK_ALERT_WEBHOOK_TOKEN") or None,
        retry_seconds=_number(env, "TIDEMARK_ALERT_RETRY_SECONDS", 30.0),
    )


SOURCES = ("landing", "kafka")


@dataclass(frozen=True)
class KafkaSettings:
    """Kafka as a stream's source (`streaming_jobs.storage.kafka`). The two option maps may hold
    credentials: out of repr, never logged."""

    source: str = "landing"  # the default source of every stream that does not name one
    port: int = 9092  # the project's own broker (tidemark kafka start), on 127.0.0.1
    bootstrap: str = "127.0.0.1:9092"
    topic_prefix: str = "tidemark."
    partitions: int = 3
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    lag_rows: int = 100_000
    lag_seconds: float = 900.0
    spark_options: dict[str, str] = field(default_factory=dict, repr=False)
    client_options: dict[str, str] = field(default_factory=dict, repr=False)


def _kafka_settings(env: dict) -> KafkaSettings:
    d = KafkaSettings()
    port = _number(env, "TIDEMARK_KAFKA_PORT", d.port, int, 1)
    if not 1 <= port <= 65535:
        raise ConfigError(f"TIDEMARK_KAFKA_PORT={port} is not a TCP port (1-65535)")
    most = env.get("TIDEMARK_KAFKA_MAX_OFFSETS_PER_TRIGGER")
    return KafkaSettings(
        source=_choice(env, "TIDEMARK_SOURCE", d.source, SOURCES),
        port=port,
        bootstrap=env.get("TIDEMARK_KAFKA_BOOTSTRAP") or f"127.0.0.1:{port}",
        topic_prefix=env.get("TIDEMARK_KAFKA_TOPIC_PREFIX", d.topic_prefix),
        partitions=_number(env, "TIDEMARK_KAFKA_PARTITIONS", d.partitions, int, 1),
        starting_offsets=_choice(
            env, "TIDEMARK_KAFKA_STARTING_OFFSETS", d.starting_offsets, ("earliest", "latest")
        ),
        max_offsets_per_trigger=(
            _number(env, "TIDEMARK_KAFKA_MAX_OFFSETS_PER_TRIGGER", 0, int, 1) if most else None
        ),
        lag_rows=_number(env, "TIDEMARK_KAFKA_LAG_ROWS", d.lag_rows, int, 1),
        lag_seconds=_number(env, "TIDEMARK_KAFKA_LAG_SECONDS", d.lag_seconds, float, 1),
        spark_options=_parse_spark_conf(env.get("TIDEMARK_KAFKA_CONF", ""), "TIDEMARK_KAFKA_CONF"),
        client_options=_parse_spark_conf(
            env.get("TIDEMARK_KAFKA_CLIENT_CONF", ""), "TIDEMARK_KAFKA_CLIENT_CONF"
        ),
    )


@dataclass(frozen=True)
class ClusterSettings:
    """The project's own Spark standalone cluster (`streaming_jobs.services.spark_cluster`)."""

    port: int = 7077  # the master's, on 127.0.0.1
    workers: int = 2
    # what each worker offers: more cores than the machine has, so that the applications
    # tidemark runs at once (a continuous run, the SQL endpoint, a Dagster run) each get an
    # executor on every worker; each application takes at most 2 (spark.cores.max)
    worker_cores: int = 4
    worker_memory: str = "6g"


def _cluster_settings(env: dict) -> ClusterSettings:
    d = ClusterSettings()
    port = _number(env, "TIDEMARK_CLUSTER_PORT", d.port, int, 1)
    if not 1 <= port <= 65535:
        raise ConfigError(f"TIDEMARK_CLUSTER_PORT={port} is not a TCP port (1-65535)")
    memory = env.get("TIDEMARK_CLUSTER_WORKER_MEMORY", d.worker_memory).strip().lower()
    if not re.fullmatch(r"\d+[mg]", memory):
        raise ConfigError(f"TIDEMARK_CLUSTER_WORKER_MEMORY={memory!r}: use a size like 3g or 2048m")
    return ClusterSettings(
        port=port,
        workers=_number(env, "TIDEMARK_CLUSTER_WORKERS", d.workers, int, 1),
        worker_cores=_number(env, "TIDEMARK_CLUSTER_WORKER_CORES", d.worker_cores, int, 1),
        worker_memory=memory,
    )


def default_work_root(root: Location) -> Path:
    """This machine's working folder for a data root on a store."""
    return DEFAULT_HOME / "work" / root.bucket / (root.key.strip("/").replace("/", "_") or "_")


def data_root_of(raw: str | Path | Location, s3: ObjectStoreSettings) -> Where:
    """A data root as given: ``s3://bucket/prefix`` (a `Location` with ``s3``'s settings), or a
    local folder (an absolute `Path`)."""
    if isinstance(raw, Location):
        return raw if not raw.on_store else Location(raw.url, s3)
    text = str(raw)
    if text.startswith(("s3://", "s3a://")):
        try:
            return Location.of(text, s3)
        except ValueError as exc:
            raise ConfigError(f"TIDEMARK_DATA_ROOT={text!r}: {exc}") from None
    if "://" in text:
        raise ConfigError(
            f"TIDEMARK_DATA_ROOT={text!r}: tidemark takes a local folder or s3://bucket/prefix "
            "(an S3-compatible store; see docs/running-at-scale.md)"
        )
    return Path(text).resolve()  # local-only: neither a store nor another scheme


@dataclass(frozen=True)
class TidemarkConfig:
    # a local folder (`Path`), or ``s3://bucket/prefix`` (a `Location`)
    data_root: Where
    spark: SparkSettings = field(default_factory=SparkSettings)
    recon_cron: str = "0 * * * *"  # the reconciliation schedule (UTC)
    # the first day (UTC, event time) of the reconciliation's daily Dagster partitions
    recon_start_date: str = "2026-01-01"
    ops: OpsSettings = field(default_factory=OpsSettings)
    sql: SqlEndpointSettings = field(default_factory=SqlEndpointSettings)
    alerts: AlertSettings = field(default_factory=AlertSettings)
    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    cluster: ClusterSettings = field(default_factory=ClusterSettings)
    s3: ObjectStoreSettings = field(default_factory=ObjectStoreSettings)
    jobs_path: tuple[Path, ...] = ()  # folders of your own jobs and streams
    # what `tidemark check` does with a job whose state is never evicted: refuse or warn
    unbounded_state: str = "refuse"
    # with a data root on a store: this machine's working folder (None: `default_work_root`)
    work_dir: Path | None = None
    # jobs seen through their rebuild's shadow (`with_shadow`); none in a user's configuration
    shadowed: tuple[str, ...] = ()

    @property
    def on_store(self) -> bool:
        return isinstance(self.data_root, Location) and self.data_root.on_store

    @property
    def work_root(self) -> Path:
        """The local folder of this machine's working state: the data root itself when it is
        local."""
        if not self.on_store:
            return Path(str(self.data_root))  # local-only: not on a store
        return self.work_dir or default_work_root(self.data_root)  # type: ignore[arg-type]

    @property
    def paths(self) -> Paths:
        return Paths(self.data_root, self.work_root, self.shadowed)

    def with_shadow(self, job: str) -> "TidemarkConfig":
        """This configuration with ``job``'s checkpoint and gold table those of its rebuild's
        shadow: what reconciles a new version before it is swapped in."""
        return replace(self, shadowed=(*self.shadowed, job))

    def with_data_root(self, root: Path | str | Location) -> "TidemarkConfig":
        return replace(self, data_root=data_root_of(root, self.s3))

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> "TidemarkConfig":
        """The settings of ``env`` (default: the process environment); raises `ConfigError`
        naming a malformed variable (unless `tolerate_bad_settings` is on)."""
        if env is not None or not _TOLERANT:
            return cls._parse(dict(os.environ if env is None else env))
        while True:
            try:
                return cls._parse(dict(os.environ))
            except ConfigError as exc:
                name = _VARIABLE.match(str(exc))
                if not name or name.group(1) not in os.environ:
                    raise
                # its default from now on, in this process and every process it starts (dbt,
                # the analysis), until the code location restarts with the variable fixed
                _PROBLEMS[name.group(1)] = str(exc)
                os.environ.pop(name.group(1))

    @classmethod
    def _parse(cls, env: dict[str, str]) -> "TidemarkConfig":
        master = env.get("TIDEMARK_SPARK_MASTER", DEFAULT_MASTER)
        partitions_raw = env.get("TIDEMARK_SHUFFLE_PARTITIONS", str(default_partitions(master)))
        try:
            partitions = int(partitions_raw)
            if partitions < 1:
                raise ValueError
        except ValueError:
            raise ConfigError(
                f"TIDEMARK_SHUFFLE_PARTITIONS={partitions_raw!r} is not a positive whole number"
            ) from None
        spark = SparkSettings(
            master=master,
            shuffle_partitions=partitions,
            ui_enabled=env.get("TIDEMARK_SPARK_UI", "0").lower() in ("1", "true", "yes"),
            jars_cache=Path(env.get("TIDEMARK_JARS_CACHE", str(DEFAULT_HOME / "ivy"))).resolve(),
            extra_packages=tuple(
                p.strip() for p in env.get("TIDEMARK_EXTRA_PACKAGES", "").split(",") if p.strip()
            ),
            extra_conf=_parse_spark_conf(env.get("TIDEMARK_SPARK_CONF", "")),
        )
        s3 = _object_store_settings(env)
        root = data_root_of(env.get("TIDEMARK_DATA_ROOT") or str(DEFAULT_HOME / "data"), s3)
        work = env.get("TIDEMARK_WORK_DIR")
        jobs_path = tuple(Path(p) for p in env.get("TIDEMARK_JOBS_PATH", "").split(os.pathsep) if p)
        unbounded = env.get("TIDEMARK_UNBOUNDED_STATE", "refuse")
        if unbounded not in ("refuse", "warn"):
            raise ConfigError(f"TIDEMARK_UNBOUNDED_STATE={unbounded!r}: use refuse or warn")
        return cls(
            data_root=root,
            spark=spark,
            unbounded_state=unbounded,
            recon_cron=_parse_cron(env.get("TIDEMARK_RECON_CRON", "0 * * * *")),
            recon_start_date=_parse_date(
                "TIDEMARK_RECON_START_DATE", env.get("TIDEMARK_RECON_START_DATE", "2026-01-01")
            ),
            ops=_ops_settings(env),
            sql=_sql_settings(env),
            alerts=_alert_settings(env),
            kafka=_kafka_settings(env),
            cluster=_cluster_settings(env),
            s3=s3,
            jobs_path=jobs_path,
            work_dir=Path(work).resolve() if work else None,
        )
