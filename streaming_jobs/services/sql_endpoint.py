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
import json
import logging
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.services.processes import accepts, alive, port_free

LOG = logging.getLogger("tidemark.sql_endpoint")
HOST = "127.0.0.1"
LAKE_CHECK_SECONDS = 5.0


class EndpointError(RuntimeError):
    """The endpoint cannot start or be reached; the message says why and what to do."""


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    pid: int


def endpoint_file(cfg: TidemarkConfig) -> Path:
    return cfg.paths.dbt / "endpoint.json"


def metastore_lock_path(cfg: TidemarkConfig) -> Path:
    return cfg.paths.dbt / "metastore.lock"


def discover(cfg: TidemarkConfig) -> Endpoint | None:
    """The data root's running endpoint, or None (no file, process gone, or port closed)."""
    try:
        info = json.loads(endpoint_file(cfg).read_text())
        endpoint = Endpoint(info["host"], int(info["port"]), int(info["pid"]))
    except (OSError, ValueError, KeyError):
        return None
    if not alive(endpoint.pid) or not accepts(endpoint.host, endpoint.port):
        return None
    return endpoint


def hold_metastore(cfg: TidemarkConfig, holder: str, *, wait: bool):
    """Take the metastore lock (an open file; closing it releases). Without ``wait``, raise
    `EndpointError` naming the holder if someone has it."""
    path = metastore_lock_path(cfg)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+")  # noqa: SIM115 - returned to the caller, who holds it
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        handle.seek(0)
        owner = handle.read().strip() or "another process"
        handle.close()
        raise EndpointError(
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


def serve(cfg: TidemarkConfig, stop: threading.Event | None = None) -> None:
    """Run the endpoint until ``stop`` is set (or SIGTERM / SIGINT when run as a program)."""
    stop = stop or threading.Event()
    if not port_free(HOST, cfg.sql.port):
        raise EndpointError(
            f"port {cfg.sql.port} on {HOST} is taken (another endpoint, or another program); "
            "stop it, or choose a free port with TIDEMARK_SQL_PORT"
        )
    lock = hold_metastore(cfg, "the SQL endpoint", wait=False)
    spark = None
    try:
        from streaming_jobs.storage.spark import start_session
        from streaming_jobs.runtime.tables import ensure_lake, missing

        started = time.monotonic()
        spark = start_session(cfg, endpoint_conf(cfg))
        ensure_lake(spark, cfg)
        jvm = spark.sparkContext._jvm  # noqa: SLF001 - the server's entry point is JVM-only
        server = jvm.org.apache.spark.sql.hive.thriftserver.HiveThriftServer2.startWithContext(
            spark._jsparkSession.sqlContext()
        )  # noqa: SLF001
        deadline = time.monotonic() + 60
        while not accepts(HOST, cfg.sql.port):
            if time.monotonic() > deadline:
                raise EndpointError(f"the Thrift server did not open port {cfg.sql.port}")
            time.sleep(0.2)
        info = {"host": HOST, "port": cfg.sql.port, "pid": os.getpid()}
        temp = endpoint_file(cfg).with_suffix(".tmp")
        temp.write_text(json.dumps(info))
        temp.rename(endpoint_file(cfg))
        LOG.warning(
            "SQL endpoint on %s:%s (data root %s), ready in %.1fs",
            HOST,
            cfg.sql.port,
            cfg.data_root,
            time.monotonic() - started,
        )
        owner = int(os.environ.get("TIDEMARK_SQL_OWNER_PID", "0") or 0)
        while not stop.wait(LAKE_CHECK_SECONDS):
            if owner and not alive(owner):
                LOG.warning(
                    "the process that started the endpoint (pid %s) is gone; stopping", owner
                )
                break
            if missing(cfg):  # cheap: files only; Spark only when a table must be made
                LOG.warning("creating missing lake tables: %s", ", ".join(ensure_lake(spark, cfg)))
        server.stop()
    finally:
        endpoint_file(cfg).unlink(missing_ok=True)
        if spark is not None:
            spark.stop()
        lock.close()


def main() -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    cfg = TidemarkConfig.from_env()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        serve(cfg, stop)
    except EndpointError as exc:
        print(f"tidemark sql endpoint: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
