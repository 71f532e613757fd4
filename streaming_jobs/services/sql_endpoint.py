"""The SQL endpoint: one long-lived Spark process that serves SQL to dbt over Thrift.

It is Spark's own Thrift JDBC/ODBC server (HiveServer2's protocol, shipped in the pyspark
wheel), started inside a SparkSession built by `streaming_jobs.storage.spark` (Delta, UTC, the jars),
listening on 127.0.0.1 only. dbt-spark's ``thrift`` method talks to it, so a reconciliation
run starts no JVM and pays no JVM warm-up, and exactly one process ever opens the Derby
metastore under the data root: this one, for its whole life (it holds ``dbt/metastore.lock``).

Started by a session (``tidemark dev``, ``tidemark live``, a test), it is given that process's id
(``TIDEMARK_SQL_OWNER_PID``) and stops by itself if the process dies without stopping it;
``tidemark sql start`` starts one that runs until ``tidemark sql stop``.

While it runs it keeps the lake complete for dbt: every few seconds it looks for lake tables
the registries declare but nobody created yet (a stream that never ran, a job just added) and
creates them empty, with their declared schema (`tables.ensure_lake`).

Its address is in ``dbt/endpoint.json`` (pid, port), written once it accepts connections and
removed when it stops; `discover` reads it and checks the process and the port.

    python -m streaming_jobs.services.sql_endpoint      # serve until SIGTERM or Ctrl-C

Start and stop it with ``tidemark sql start|stop|status`` (and ``tidemark dev`` / ``make live``).
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.services.lifecycle import HOST, Service, ServiceError
from streaming_jobs.services.processes import accepts, port_free

LOG = logging.getLogger("tidemark.sql_endpoint")
LAKE_CHECK_SECONDS = 5.0
BROKEN_RETRY_SECONDS = 30.0  # within tidemark-dbt's wait for missing tables (60 s)


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    pid: int


def endpoint_file(cfg: TidemarkConfig) -> Path:
    return cfg.paths.dbt / "endpoint.json"


def metastore_lock_path(cfg: TidemarkConfig) -> Path:
    return cfg.paths.dbt / "metastore.lock"


def hold_metastore(cfg: TidemarkConfig, holder: str, *, wait: bool):
    """Take the metastore lock (an open file; closing it releases). Without ``wait``, raise
    `ServiceError` naming the holder if someone has it."""
    path = metastore_lock_path(cfg)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+")  # noqa: SIM115 - returned to the caller, who holds it
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        handle.seek(0)
        owner = handle.read().strip() or "another process"
        handle.close()
        raise ServiceError(
            f"the Derby metastore under {cfg.paths.dbt} is in use by {owner}; one process opens "
            "it at a time. Wait for it to finish (a dbt run), or stop it (tidemark sql stop)."
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{holder} (pid {os.getpid()})")
    handle.flush()
    return handle


def endpoint_conf(cfg: TidemarkConfig) -> dict[str, str]:
    from streaming_jobs.storage.spark import cached_jars, spark_conf

    conf = spark_conf(cfg, hive_metastore=True)
    jars = cached_jars(cfg)
    if jars:
        # The Thrift server runs each statement under the session's own class loader, which
        # does not see jars added after the JVM started (spark.jars): Delta's catalog classes
        # then fail to load (NoClassDefFoundError). On the driver's class path they are seen
        # by every loader.
        conf["spark.driver.extraClassPath"] = ":".join(jars)
    conf.update(
        {
            "spark.app.name": "tidemark-sql-endpoint",
            "spark.driver.memory": cfg.sql.driver_memory,
            # HiveServer2's own settings, read by Spark's Thrift server from the Hadoop conf
            "spark.hadoop.hive.server2.thrift.bind.host": HOST,
            "spark.hadoop.hive.server2.thrift.port": str(cfg.sql.port),
            "spark.hadoop.hive.server2.transport.mode": "binary",
        }
    )
    return conf


class SqlEndpoint(Service):
    """The endpoint: its supervisor is the Spark process itself, which serves Thrift
    (`streaming_jobs.services.lifecycle`)."""

    title = "the SQL endpoint"
    command = "tidemark sql"
    module = "streaming_jobs.services.sql_endpoint"
    owner_variable = "TIDEMARK_SQL_OWNER_PID"
    port_variable = "TIDEMARK_SQL_PORT"
    log_name = "sql_endpoint.log"
    start_timeout = 300.0

    @property
    def port(self) -> int:
        return self.cfg.sql.port

    @property
    def info_file(self) -> Path:
        return endpoint_file(self.cfg)

    def run(self, stop: threading.Event) -> int:
        """Serve until ``stop`` (or the owner dies), keeping the lake complete for dbt."""
        logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
        cfg = self.cfg
        if not port_free(HOST, self.port):
            raise ServiceError(
                f"port {self.port} on {HOST} is taken (another endpoint, or another program); "
                f"stop it, or choose a free port with {self.port_variable}"
            )
        lock = hold_metastore(cfg, "the SQL endpoint", wait=False)
        spark = None
        try:
            from streaming_jobs.runtime.tables import ensure_lake, missing
            from streaming_jobs.storage.spark import start_session

            started = time.monotonic()
            spark = start_session(cfg, endpoint_conf(cfg))
            ensure_lake(spark, cfg, skip_broken=True)
            jvm = spark.sparkContext._jvm  # noqa: SLF001 - the server's entry point is JVM-only
            thrift = jvm.org.apache.spark.sql.hive.thriftserver.HiveThriftServer2
            server = thrift.startWithContext(spark._jsparkSession.sqlContext())  # noqa: SLF001
            deadline = time.monotonic() + 60
            while not accepts(HOST, self.port):
                if time.monotonic() > deadline:
                    raise ServiceError(f"the Thrift server did not open port {self.port}")
                time.sleep(0.2)
            self.announce()
            LOG.warning(
                "SQL endpoint on %s:%s (data root %s), ready in %.1fs",
                HOST,
                self.port,
                cfg.data_root,
                time.monotonic() - started,
            )
            # what a broken job leaves missing (ensure_lake logged why): tried again only when
            # the missing tables change or BROKEN_RETRY_SECONDS passed, not with Spark every check
            left, tried_at = set(missing(cfg)), time.monotonic()
            while not stop.wait(LAKE_CHECK_SECONDS):
                if self.owner_gone():
                    LOG.warning("the process that started the endpoint is gone; stopping")
                    break
                absent = set(missing(cfg))  # cheap: files only; Spark only when one is made
                if absent and (
                    absent != left or time.monotonic() - tried_at > BROKEN_RETRY_SECONDS
                ):
                    made = ensure_lake(spark, cfg, skip_broken=True)
                    left, tried_at = set(missing(cfg)), time.monotonic()
                    if made:
                        LOG.warning("created missing lake tables: %s", ", ".join(made))
            server.stop()
        finally:
            self.withdraw()
            if spark is not None:
                spark.stop()
            lock.close()
        return 0


def _endpoint(info: dict) -> Endpoint:
    return Endpoint(info.get("host", HOST), int(info["port"]), int(info["pid"]))


def shared(cfg: TidemarkConfig) -> Endpoint | None:
    """The Thrift server of your own this data root uses (``TIDEMARK_SQL_ENDPOINT``), when it
    answers; None when none is set or it does not answer (pid 0: not a process of ours)."""
    address = cfg.sql.shared_address
    if address is None or not accepts(*address):
        return None
    return Endpoint(address[0], address[1], 0)


def discover(cfg: TidemarkConfig) -> Endpoint | None:
    """The endpoint dbt uses for this data root: the shared one when set (and answering), else
    the data root's own running endpoint, or None (no file, process gone, or port closed)."""
    if cfg.sql.shared:
        return shared(cfg)
    info = SqlEndpoint(cfg).discover()
    return _endpoint(info) if info else None


def start(
    cfg: TidemarkConfig,
    *,
    owned: bool = True,
    timeout: float | None = None,
    environ: Mapping[str, str] | None = None,
    owner: int | None = None,
) -> Endpoint:
    """Start the data root's SQL endpoint unless it runs; return its address once it answers.
    ``owned``: it stops by itself when this process dies (``tidemark dev``, ``live``, tests),
    or ``owner``; without, it runs until stopped (``tidemark sql start``). With a shared endpoint
    (``TIDEMARK_SQL_ENDPOINT``) nothing starts: that one is returned once it answers."""
    if cfg.sql.shared:
        deadline = time.monotonic() + (60.0 if timeout is None else timeout)
        while (found := shared(cfg)) is None:
            if time.monotonic() > deadline:
                raise ServiceError(
                    f"the shared SQL endpoint TIDEMARK_SQL_ENDPOINT={cfg.sql.shared} does not "
                    "answer; tidemark starts no endpoint of its own while it is set: start that "
                    "server, or unset TIDEMARK_SQL_ENDPOINT"
                )
            time.sleep(1.0)
        return found
    return _endpoint(SqlEndpoint(cfg, environ).start(owned=owned, timeout=timeout, owner=owner))


def stop(cfg: TidemarkConfig, timeout: float | None = None) -> bool:
    """Stop the data root's SQL endpoint cleanly; False if none ran (a shared endpoint is
    never stopped: it is not tidemark's)."""
    if cfg.sql.shared:
        return False
    return SqlEndpoint(cfg).stop(timeout)


if __name__ == "__main__":
    raise SystemExit(SqlEndpoint.main())
