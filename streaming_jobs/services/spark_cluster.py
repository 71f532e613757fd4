"""The project's own Spark standalone cluster: a master and workers on 127.0.0.1.

For trying tidemark on a cluster on one machine and for the tests (a real cluster is yours:
point ``TIDEMARK_SPARK_MASTER`` at it; docs/running-at-scale.md). The daemons are Spark's own
(``spark-class org.apache.spark.deploy.master.Master`` / ``...worker.Worker``) from the
installed pyspark, each a JVM of its own; no download. Every job, the reconciliation and the
sensors then run unchanged with ``TIDEMARK_SPARK_MASTER=spark://127.0.0.1:<port>``: the driver
stays in the tidemark process, the executors run in the workers.

A Python supervisor (``python -m streaming_jobs.services.spark_cluster``) owns the JVMs: SIGTERM to it
stops the workers, then the master. A cluster started for a session
(``TIDEMARK_CLUSTER_OWNER_PID``) stops when that process dies. Its state lives under
``<data root>/spark-cluster`` (the workers' folders: each application's executor logs), its
logs in ``<data root>/logs/spark-master.log`` and ``spark-worker-<n>.log``.

    tidemark cluster start|stop|status
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.services.lifecycle import HOST, Service
from streaming_jobs.services.processes import free_port

DAEMON_MEMORY = "512m"  # the master's and each worker's own JVM (not the executors')


@dataclass(frozen=True)
class Cluster:
    port: int
    ui_port: int  # the master's web UI (and its /json status)
    workers: int
    pid: int  # the supervisor's

    @property
    def master(self) -> str:
        return f"spark://{HOST}:{self.port}"

    @property
    def ui(self) -> str:
        return f"http://{HOST}:{self.ui_port}"


def home(cfg: TidemarkConfig) -> Path:
    return cfg.work_root / "spark-cluster"


def master_url(cfg: TidemarkConfig) -> str:
    return f"spark://{HOST}:{cfg.cluster.port}"


def status(ui_port: int, timeout: float = 3.0) -> dict:
    """The master's own view (its web UI's JSON): workers, their state, cores, applications."""
    with urllib.request.urlopen(f"http://{HOST}:{ui_port}/json/", timeout=timeout) as answer:
        return json.loads(answer.read())


def alive_workers(ui_port: int) -> int:
    try:
        return sum(1 for w in status(ui_port).get("workers", []) if w.get("state") == "ALIVE")
    except (OSError, ValueError):
        return 0


def _spark_class(*args: str) -> list[str]:
    from streaming_jobs.storage.maven import spark_home

    return [str(spark_home() / "bin" / "spark-class"), *args]


def _env(cfg: TidemarkConfig) -> dict:
    from streaming_jobs.storage.maven import spark_home
    from streaming_jobs.storage.spark import check_java

    java = Path(check_java()).resolve()
    return {
        **os.environ,
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": HOST,
        "JAVA_HOME": os.environ.get("JAVA_HOME") or str(java.parent.parent),
        "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
        "MALLOC_ARENA_MAX": "2",
        # an always-on worker removes the folders of applications that ended a day ago
        "SPARK_WORKER_OPTS": "-Dspark.worker.cleanup.enabled=true "
        "-Dspark.worker.cleanup.appDataTtl=86400",
        # no REST submission server (tidemark's driver is its own process; it would take
        # port 6066 on every machine)
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        # executors keep event time in UTC, like the driver
        "SPARK_DAEMON_JAVA_OPTS": "-Duser.timezone=UTC",
    }


class SparkCluster(Service):
    """The cluster: its supervisor runs the master's and the workers' JVMs
    (`streaming_jobs.services.lifecycle`); it answers once every worker registered."""

    title = "the Spark cluster"
    command = "tidemark cluster"
    module = "streaming_jobs.services.spark_cluster"
    owner_variable = "TIDEMARK_CLUSTER_OWNER_PID"
    port_variable = "TIDEMARK_CLUSTER_PORT"
    log_name = "spark-master.log"
    start_timeout = 180.0

    @property
    def port(self) -> int:
        return self.cfg.cluster.port

    @property
    def info_file(self) -> Path:
        return home(self.cfg) / "cluster.json"

    def run(self, stop: threading.Event) -> int:
        """The master and the workers until ``stop`` (or the owner dies); workers stop first."""
        settings = self.cfg.cluster
        folder = home(self.cfg)
        folder.mkdir(parents=True, exist_ok=True)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        env = _env(self.cfg)
        ui_port = free_port(HOST)
        procs: list[subprocess.Popen] = []

        def launch(log_name: str, *args: str) -> None:
            with open(self.cfg.paths.logs / log_name, "ab") as log:
                procs.append(
                    subprocess.Popen(
                        _spark_class(*args),
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                    )
                )

        launch(
            self.log_name,
            "org.apache.spark.deploy.master.Master",
            "--host",
            HOST,
            "--port",
            str(self.port),
            "--webui-port",
            str(ui_port),
        )

        def workers() -> None:  # once the master answers
            for n in range(1, settings.workers + 1):
                work = folder / f"worker-{n}"
                work.mkdir(exist_ok=True)
                launch(
                    f"spark-worker-{n}.log",
                    "org.apache.spark.deploy.worker.Worker",
                    "--host",
                    HOST,
                    "--webui-port",
                    str(free_port(HOST)),
                    "--cores",
                    str(settings.worker_cores),
                    "--memory",
                    settings.worker_memory,
                    "--work-dir",
                    str(work),
                    master_url(self.cfg),
                )

        # a daemon that dies leaves the cluster not whole (1); workers stop first, then the master
        return self.supervise(
            procs,
            stop,
            30,
            on_port=workers,
            ready=lambda: alive_workers(ui_port) >= settings.workers,
            ui_port=ui_port,
            workers=settings.workers,
        )


def _cluster(info: dict) -> Cluster:
    return Cluster(int(info["port"]), int(info["ui_port"]), int(info["workers"]), int(info["pid"]))


def discover(cfg: TidemarkConfig) -> Cluster | None:
    """The data root's running cluster, or None."""
    info = SparkCluster(cfg).discover()
    return _cluster(info) if info else None


def start(
    cfg: TidemarkConfig,
    *,
    owned: bool = True,
    timeout: float | None = None,
    owner: int | None = None,
) -> Cluster:
    """Start the data root's cluster on ``TIDEMARK_CLUSTER_PORT`` unless it runs; return it once
    every worker registered with the master. ``owned``: it stops when this process ends (or
    ``owner``)."""
    return _cluster(SparkCluster(cfg).start(owned=owned, timeout=timeout, owner=owner))


def stop(cfg: TidemarkConfig, timeout: float | None = None) -> bool:
    """Stop the data root's cluster (workers, then master); False if none ran."""
    return SparkCluster(cfg).stop(timeout)


if __name__ == "__main__":
    raise SystemExit(SparkCluster.main())
