"""Background services tidemark starts and stops itself, all on 127.0.0.1: the SQL endpoint,
and the project's Kafka broker when a stream reads Kafka (`streaming_jobs.services.kafka_broker`).

A service runs as its own process group (so Ctrl-C in the terminal that started it does not
kill it half way), writes its full log under ``<data root>/logs/``, and is ready when it
answers on its port. Starting one that already runs returns the running one; a service that
dies while starting is reported with the end of its log.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from streaming_jobs.core.config import CHECKOUT, TidemarkConfig
from streaming_jobs.services.sql_endpoint import Endpoint, discover, endpoint_file


class ServiceError(RuntimeError):
    """A service could not start or stop; the message says why and where its log is."""


def _tail(path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def start_sql_endpoint(
    cfg: TidemarkConfig, timeout: float = 300.0, *, owned: bool = True
) -> Endpoint:
    """Start the data root's SQL endpoint unless it runs; return its address once it answers.

    ``owned``: it stops by itself when this process dies (``tidemark dev``, ``live``, tests);
    without, it runs until stopped (``tidemark sql start``).
    """
    found = discover(cfg)
    if found:
        return found
    cfg.paths.logs.mkdir(parents=True, exist_ok=True)
    log_path = cfg.paths.logs / "sql_endpoint.log"
    env = {
        **os.environ,
        "TIDEMARK_DATA_ROOT": str(cfg.data_root),
        "TIDEMARK_SQL_PORT": str(cfg.sql.port),
        "TIDEMARK_SQL_OWNER_PID": str(os.getpid()) if owned else "",
    }
    with open(log_path, "a") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streaming_jobs.services.sql_endpoint"],
            env=env,
            cwd=CHECKOUT,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = discover(cfg)
        if found:
            return found
        if proc.poll() is not None:
            raise ServiceError(
                f"the SQL endpoint exited while starting (code {proc.returncode})"
                f"; its log {log_path} ends with:\n{_tail(log_path)}"
            )
        time.sleep(0.5)
    proc.terminate()
    raise ServiceError(
        f"the SQL endpoint did not answer on 127.0.0.1:{cfg.sql.port} within "
        f"{timeout:.0f}s; see {log_path}"
    )


def _gone(pid: int) -> bool:
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return True  # our own child, now reaped
    except ChildProcessError:
        pass  # started by another process
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def stop_sql_endpoint(cfg: TidemarkConfig, timeout: float = 60.0) -> bool:
    """Stop the data root's SQL endpoint cleanly (SIGTERM, then SIGKILL); False if none ran."""
    found = discover(cfg)
    if not found:
        endpoint_file(cfg).unlink(missing_ok=True)
        return False
    os.kill(found.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _gone(found.pid):
            return True
        time.sleep(0.3)
    os.kill(found.pid, signal.SIGKILL)
    endpoint_file(cfg).unlink(missing_ok=True)
    return True


def start_kafka_if_used(cfg: TidemarkConfig) -> str | None:
    """When a registered stream reads Kafka and no brokers of your own are named
    (TIDEMARK_KAFKA_BOOTSTRAP), start the project's broker for this process (it stops when the
    process ends); say which brokers are used, or None without Kafka."""
    from streaming_jobs.services import kafka_broker
    from streaming_jobs.storage.kafka import source_of
    from streaming_jobs.storage.registry import streams

    if not any(source_of(cfg, schema) == "kafka" for schema in streams().values()):
        return None
    if os.environ.get("TIDEMARK_KAFKA_BOOTSTRAP"):
        return f"brokers {cfg.kafka.bootstrap}"
    broker = kafka_broker.start(cfg)
    return f"the project's broker on {broker.bootstrap} (log {cfg.paths.logs / 'kafka.log'})"


def start_cluster_if_used(cfg: TidemarkConfig) -> str | None:
    """When TIDEMARK_SPARK_MASTER names the project's own cluster (spark://127.0.0.1:<its
    port>) and it does not run, start it for this process (it stops when the process ends);
    say which cluster is used, or None in local mode or on a cluster of your own."""
    from streaming_jobs.services import spark_cluster

    if cfg.spark.master != spark_cluster.master_url(cfg):
        return None
    found = spark_cluster.discover(cfg) or spark_cluster.start(cfg)
    return (
        f"the project's Spark cluster {found.master} ({found.workers} workers, UI "
        f"{found.ui}; logs {cfg.paths.logs}/spark-*.log)"
    )
