"""The project's own Kafka broker: Apache Kafka in KRaft mode, one node, on 127.0.0.1.

For development and tests (production brokers are yours: ``TIDEMARK_KAFKA_BOOTSTRAP``). It is
Apache Kafka's own broker, from its jars on Maven Central (``kafka_2.13``, resolved once into
the jars cache by `streaming_jobs.storage.maven`; Scala's library comes from the pyspark wheel), in a
JVM of its own: no Docker, no ZooKeeper. The node is broker and controller at once; its log
dirs and metadata live under ``<data root>/kafka``, its log in ``<data root>/logs/kafka.log``.

A small Python supervisor (``python -m streaming_jobs.services.kafka_broker``) owns the JVM: SIGTERM
to the supervisor is a clean shutdown of the broker (its logs flushed, no recovery at the
next start), and a broker started for a session (``TIDEMARK_KAFKA_OWNER_PID``) stops when
that process dies without stopping it.

    tidemark kafka start|stop|status
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.services.processes import (
    accepts,
    alive,
    free_port,
    launch_supervisor,
    port_free,
    stop_supervisor,
    wait_for,
    write_json,
)

HOST = "127.0.0.1"
KAFKA_VERSION = "4.1.1"
BROKER_PACKAGES = [
    f"org.apache.kafka:kafka_2.13:{KAFKA_VERSION}",
    # the broker logs through SLF4J 1.7; this binds it to the log4j2 it brings
    "org.apache.logging.log4j:log4j-slf4j-impl:2.24.3",
]
HEAP = "-Xmx512m"
LOG4J2 = Path(__file__).resolve().with_name("kafka_log4j2.properties")


class BrokerError(RuntimeError):
    """The broker cannot start or stop; the message says why and what to do."""


@dataclass(frozen=True)
class Broker:
    host: str
    port: int
    pid: int  # the supervisor's

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"


def home(cfg: TidemarkConfig) -> Path:
    return cfg.data_root / "kafka"


def _info_file(cfg: TidemarkConfig) -> Path:
    return home(cfg) / "broker.json"


def classpath(cfg: TidemarkConfig) -> list[Path]:
    """The broker's jars: Kafka's (resolved and cached) and Scala's library from pyspark."""
    from streaming_jobs.storage.maven import resolve, spark_home

    jars = resolve(
        BROKER_PACKAGES,
        cfg.spark.jars_cache / "kafka-broker",
        repositories=cfg.spark.extra_conf.get("spark.jars.repositories"),
    )
    scala = sorted((spark_home() / "jars").glob("scala-library-2.13*.jar"))
    return [*jars, *scala]


def discover(cfg: TidemarkConfig) -> Broker | None:
    """The data root's running broker, or None."""
    try:
        info = json.loads(_info_file(cfg).read_text())
        broker = Broker(HOST, int(info["port"]), int(info["pid"]))
    except (OSError, ValueError, KeyError):
        return None
    if not alive(broker.pid) or not accepts(HOST, broker.port):
        return None
    return broker


def server_properties(cfg: TidemarkConfig, port: int, controller_port: int) -> str:
    return "\n".join(
        [
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@{HOST}:{controller_port}",
            f"listeners=PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{controller_port}",
            f"advertised.listeners=PLAINTEXT://{HOST}:{port}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            f"log.dirs={home(cfg) / 'data'}",
            f"num.partitions={cfg.kafka.partitions}",
            # one node: every internal topic has one replica
            "offsets.topic.replication.factor=1",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            # topics are made on purpose (tidemark creates a stream's topic with its partitions)
            "auto.create.topics.enable=false",
            "log.retention.hours=168",
            "",
        ]
    )


def _java(cfg: TidemarkConfig, main: str, *args: str) -> list[str]:
    from streaming_jobs.storage.spark import check_java

    cp = ":".join(str(j) for j in classpath(cfg))
    return [
        check_java(),
        HEAP,
        "-XX:+UseG1GC",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={LOG4J2}",
        "-cp",
        cp,
        main,
        *args,
    ]


def _cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes in URL-safe base64, unpadded (22 characters).

    One id in 64 would start with ``-``, which the storage tool's argument parser takes for an
    option ("--cluster-id: expected one argument"); like Kafka's own ``Uuid.randomUuid`` such
    ids are drawn again."""
    while True:
        found = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not found.startswith("-"):
            return found


def prepare(cfg: TidemarkConfig, port: int) -> Path:
    """Write server.properties (keeping the controller port of earlier starts when it is free)
    and format the storage once; returns the properties file."""
    folder = home(cfg)
    folder.mkdir(parents=True, exist_ok=True)
    ports = folder / "ports.json"
    try:
        controller = int(json.loads(ports.read_text())["controller"])
        if not port_free(HOST, controller):
            controller = free_port(HOST)
    except (OSError, ValueError, KeyError):
        controller = free_port(HOST)
    ports.write_text(json.dumps({"broker": port, "controller": controller}))
    props = folder / "server.properties"
    props.write_text(server_properties(cfg, port, controller))
    if not (folder / "data" / "meta.properties").is_file():
        done = subprocess.run(
            _java(
                cfg,
                "kafka.tools.StorageTool",
                "format",
                f"--cluster-id={_cluster_id()}",
                "-c",
                str(props),
            ),
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        if done.returncode != 0:
            raise BrokerError(
                f"formatting the Kafka storage in {folder / 'data'} failed:\n"
                f"{(done.stdout + done.stderr)[-2000:]}"
            )
    return props


def serve(cfg: TidemarkConfig, port: int, stop: threading.Event) -> int:
    """Run the broker JVM until ``stop`` (or the owner process dies); a clean shutdown."""
    props = prepare(cfg, port)
    cfg.paths.logs.mkdir(parents=True, exist_ok=True)
    with open(cfg.paths.logs / "kafka.log", "ab") as log:
        java = subprocess.Popen(
            _java(cfg, "kafka.Kafka", str(props)),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    owner = int(os.environ.get("TIDEMARK_KAFKA_OWNER_PID", "0") or 0)
    deadline = time.monotonic() + 120
    announced = False
    try:
        while not stop.wait(0.2):
            if java.poll() is not None:
                return java.returncode or 1
            if not announced and accepts(HOST, port, 0.5):
                write_json(
                    _info_file(cfg),
                    {"host": HOST, "port": port, "pid": os.getpid(), "java_pid": java.pid},
                )
                announced = True
            if not announced and time.monotonic() > deadline:
                return 3
            if owner and not alive(owner):
                break
    finally:
        _info_file(cfg).unlink(missing_ok=True)
        if java.poll() is None:
            java.terminate()  # Kafka's shutdown hook: controlled shutdown, logs flushed
            try:
                java.wait(60)
            except subprocess.TimeoutExpired:
                java.kill()
                java.wait()
    return 0


def _log_tail(cfg: TidemarkConfig, lines: int = 30) -> str:
    try:
        return "\n".join(
            (cfg.paths.logs / "kafka.log").read_text(errors="replace").splitlines()[-lines:]
        )
    except OSError:
        return "(no log)"


def start(cfg: TidemarkConfig, *, owned: bool = True, timeout: float = 120.0) -> Broker:
    """Start the data root's broker on ``TIDEMARK_KAFKA_PORT`` unless it runs; return it once
    it answers. ``owned``: it stops when this process ends."""
    found = discover(cfg)
    if found:
        return found
    port = cfg.kafka.port
    if not port_free(HOST, port):
        raise BrokerError(
            f"port {port} on {HOST} is taken by another program (or a broker of another data "
            f"root); stop it, or choose a free port with TIDEMARK_KAFKA_PORT"
        )
    classpath(cfg)  # resolve (first start only) before the clock runs
    proc = launch_supervisor(
        "streaming_jobs.services.kafka_broker",
        cfg.paths.logs / "kafka.log",
        {"TIDEMARK_DATA_ROOT": str(cfg.data_root), "TIDEMARK_KAFKA_PORT": str(port)},
        "TIDEMARK_KAFKA_OWNER_PID",
        owned,
    )

    def ready() -> Broker | None:
        found = discover(cfg)
        return found if found and _ready(cfg, found) else None

    found = wait_for(ready, proc, timeout)
    if found:
        return found
    if proc.poll() is not None:
        raise BrokerError(
            f"the Kafka broker exited ({proc.returncode}) before it answered on "
            f"{HOST}:{port}; its log ({cfg.paths.logs / 'kafka.log'}) ends:\n" + _log_tail(cfg)
        )
    proc.terminate()
    raise BrokerError(
        f"the Kafka broker did not answer on {HOST}:{port} in {timeout:.0f} s; "
        f"see {cfg.paths.logs / 'kafka.log'}"
    )


def _ready(cfg: TidemarkConfig, broker: Broker) -> bool:
    """The broker serves metadata (the controller elected itself)."""
    from confluent_kafka.admin import AdminClient

    try:
        meta = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=5)
    except Exception:  # noqa: BLE001 - not ready yet
        return False
    return bool(meta.brokers)


def stop(cfg: TidemarkConfig, timeout: float = 90.0) -> bool:
    """Stop the data root's broker cleanly; False if none ran."""
    try:
        info = json.loads(_info_file(cfg).read_text())
    except (OSError, ValueError):
        return False
    return stop_supervisor(
        int(info.get("pid", 0)), [int(info.get("java_pid", 0))], timeout, _info_file(cfg)
    )


def main() -> int:
    cfg = TidemarkConfig.from_env()
    stop_event = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop_event.set())
    try:
        return serve(cfg, cfg.kafka.port, stop_event)
    except BrokerError as exc:
        print(f"tidemark kafka: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
