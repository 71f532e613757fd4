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
import subprocess
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.services.lifecycle import HOST, Service, ServiceError
from streaming_jobs.services.processes import free_port, port_free

KAFKA_VERSION = "4.1.1"
BROKER_PACKAGES = [
    f"org.apache.kafka:kafka_2.13:{KAFKA_VERSION}",
    # the broker logs through SLF4J 1.7; this binds it to the log4j2 it brings
    "org.apache.logging.log4j:log4j-slf4j-impl:2.24.3",
]
HEAP = "-Xmx512m"
LOG4J2 = Path(__file__).resolve().with_name("kafka_log4j2.properties")


@dataclass(frozen=True)
class Broker:
    host: str
    port: int
    pid: int  # the supervisor's

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"


def home(cfg: TidemarkConfig) -> Path:
    return cfg.work_root / "kafka"


def classpath(cfg: TidemarkConfig) -> list[Path]:
    """The broker's jars: Kafka's (resolved and cached) and Scala's library from pyspark."""
    from streaming_jobs.storage.maven import resolve, spark_home
    from streaming_jobs.storage.spark import ivy_downloads, resolution_settings

    jars = resolve(
        BROKER_PACKAGES,
        cfg.spark.jars_cache / "kafka-broker",
        settings=resolution_settings(cfg),
        downloads=ivy_downloads(cfg),
    )
    scala = sorted((spark_home() / "jars").glob("scala-library-2.13*.jar"))
    return [*jars, *scala]


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


def format_storage(cfg: TidemarkConfig, port: int) -> Path:
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
            raise ServiceError(
                f"formatting the Kafka storage in {folder / 'data'} failed:\n"
                f"{(done.stdout + done.stderr)[-2000:]}"
            )
    return props


class KafkaBroker(Service):
    """The broker: its supervisor runs the broker's JVM (`streaming_jobs.services.lifecycle`)."""

    title = "the Kafka broker"
    command = "tidemark kafka"
    module = "streaming_jobs.services.kafka_broker"
    owner_variable = "TIDEMARK_KAFKA_OWNER_PID"
    port_variable = "TIDEMARK_KAFKA_PORT"
    log_name = "kafka.log"
    start_timeout = 120.0
    stop_timeout = 90.0

    @property
    def port(self) -> int:
        return self.cfg.kafka.port

    @property
    def info_file(self) -> Path:
        return home(self.cfg) / "broker.json"

    def prepare(self) -> None:
        classpath(self.cfg)  # resolved (first start only) before the clock runs

    def ready(self, info: dict) -> bool:
        """The broker serves metadata (the controller elected itself)."""
        from confluent_kafka.admin import AdminClient

        bootstrap = f"{HOST}:{info['port']}"
        try:
            meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=5)
        except Exception:  # noqa: BLE001 - not ready yet
            return False
        return bool(meta.brokers)

    def run(self, stop: threading.Event) -> int:
        """The broker's JVM until ``stop`` (or the owner dies); then a clean shutdown."""
        props = format_storage(self.cfg, self.port)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            java = subprocess.Popen(
                _java(self.cfg, "kafka.Kafka", str(props)),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        return self.supervise([java], stop, 60)  # Kafka's shutdown hook: controlled, logs flushed


def _broker(info: dict) -> Broker:
    return Broker(HOST, int(info["port"]), int(info["pid"]))


def discover(cfg: TidemarkConfig) -> Broker | None:
    """The data root's running broker, or None."""
    info = KafkaBroker(cfg).discover()
    return _broker(info) if info else None


def start(
    cfg: TidemarkConfig,
    *,
    owned: bool = True,
    timeout: float | None = None,
    owner: int | None = None,
) -> Broker:
    """Start the data root's broker on ``TIDEMARK_KAFKA_PORT`` unless it runs; return it once
    it serves metadata. ``owned``: it stops when this process ends (or ``owner``)."""
    return _broker(KafkaBroker(cfg).start(owned=owned, timeout=timeout, owner=owner))


def stop(cfg: TidemarkConfig, timeout: float | None = None) -> bool:
    """Stop the data root's broker cleanly; False if none ran."""
    return KafkaBroker(cfg).stop(timeout)


if __name__ == "__main__":
    raise SystemExit(KafkaBroker.main())
