"""Kafka as a stream's source: topics, publishing, committed offsets, lag and accounting.

A stream reads Kafka when its schema says ``source="kafka"`` or ``TIDEMARK_SOURCE=kafka`` is the
default. Its topic is ``<TIDEMARK_KAFKA_TOPIC_PREFIX><stream>`` unless the schema names one; each
record's value is one JSON object (the landing line), its key the stream's key.

Bronze ingestion reads the topic with Spark's Kafka source (`streaming_jobs.runtime.ingestion`): the
offsets a batch reads are in the checkpoint before the batch runs, and both of its writes are
idempotent Delta writes keyed by the checkpoint's identity and the batch id, so a batch replayed
after a crash reads the same offsets and adds nothing twice. Every record lands once, in bronze
or quarantine, with ``_source_partition`` and ``_source_offset``: `accounting` checks that per
partition the offsets read are contiguous, unique and end where the checkpoint says.

Everything here is Python (confluent-kafka, librdkafka): sensors and the generator start no JVM.
Credentials come from ``TIDEMARK_KAFKA_CLIENT_CONF`` (and ``TIDEMARK_KAFKA_CONF`` for Spark) and
are never logged.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from streaming_jobs.core import locations
from streaming_jobs.core.locations import Location, Where
from streaming_jobs.core.checkpoints import last_committed_batch, query_name
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.schemas import StreamSchema


class KafkaSourceError(RuntimeError):
    """A Kafka operation failed; the message names the topic or broker and what to do."""


class TopicMissing(KafkaSourceError):
    """The brokers answered and have no such topic."""


def source_of(cfg: TidemarkConfig, schema: StreamSchema) -> str:
    """``landing`` or ``kafka``: the schema's own choice, else ``TIDEMARK_SOURCE``."""
    return schema.source or cfg.kafka.source


def topic_of(cfg: TidemarkConfig, schema: StreamSchema) -> str:
    return schema.topic or f"{cfg.kafka.topic_prefix}{schema.name}"


def client_config(cfg: TidemarkConfig, **extra) -> dict:
    """librdkafka settings: the bootstrap servers, ``TIDEMARK_KAFKA_CLIENT_CONF``, ``extra``."""
    return {"bootstrap.servers": cfg.kafka.bootstrap, **cfg.kafka.client_options, **extra}


def spark_options(cfg: TidemarkConfig, topic: str) -> dict[str, str]:
    """The options of Spark's Kafka source for ``topic`` (credentials included: never log)."""
    options = {
        "kafka.bootstrap.servers": cfg.kafka.bootstrap,
        "subscribe": topic,
        "startingOffsets": cfg.kafka.starting_offsets,
        # records deleted by retention before they were read are lost events: stop, say so
        "failOnDataLoss": "true",
    }
    options.update({f"kafka.{k}": v for k, v in cfg.kafka.spark_options.items()})
    if cfg.kafka.max_offsets_per_trigger:
        options["maxOffsetsPerTrigger"] = str(cfg.kafka.max_offsets_per_trigger)
    return options


def _broker_hint(cfg: TidemarkConfig) -> str:
    return (
        f"check that a broker answers at {cfg.kafka.bootstrap} (the project's own: "
        "'tidemark kafka start'; another: TIDEMARK_KAFKA_BOOTSTRAP and its credentials in "
        "TIDEMARK_KAFKA_CLIENT_CONF)"
    )


def ensure_topic(
    cfg: TidemarkConfig, topic: str, partitions: int | None = None, timeout: float = 30.0
) -> int:
    """Create ``topic`` unless it exists; returns its partition count."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(client_config(cfg))
    meta = admin.list_topics(timeout=timeout)
    if topic in meta.topics and not meta.topics[topic].error:
        return len(meta.topics[topic].partitions)
    wanted = partitions or cfg.kafka.partitions
    future = admin.create_topics([NewTopic(topic, num_partitions=wanted, replication_factor=1)])[
        topic
    ]
    try:
        future.result(timeout=timeout)
    except Exception as exc:  # noqa: BLE001 - re-raised with the topic and what to do
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise KafkaSourceError(
                f"could not create Kafka topic {topic}: {exc}; {_broker_hint(cfg)}"
            ) from exc
    for _ in range(int(timeout * 10)):  # metadata reaches the client a little later
        meta = admin.list_topics(topic=topic, timeout=timeout)
        if topic in meta.topics and meta.topics[topic].partitions:
            return len(meta.topics[topic].partitions)
        time.sleep(0.1)
    return wanted


def publish(
    cfg: TidemarkConfig,
    topic: str,
    records: Iterable[tuple[bytes | None, bytes]],
    timeout: float = 120.0,
) -> int:
    """Send (key, value) records to ``topic``, wait until the broker has every one; returns the
    count. The producer is idempotent (retries add no copies); any record the broker did not
    take raises, naming the topic."""
    from confluent_kafka import Producer

    errors: list[str] = []

    def delivered(err, _msg) -> None:
        if err is not None:
            errors.append(str(err))

    producer = Producer(
        client_config(cfg, **{"enable.idempotence": True, "acks": "all", "linger.ms": 20})
    )
    sent = 0
    for key, value in records:
        while True:
            try:
                producer.produce(topic, value=value, key=key, on_delivery=delivered)
                break
            except BufferError:  # the local queue is full: let it drain
                producer.poll(0.5)
        sent += 1
        if sent % 10_000 == 0:
            producer.poll(0)
    left = producer.flush(timeout)
    if left or errors:
        raise KafkaSourceError(
            f"publishing to Kafka topic {topic}: {left} record(s) not confirmed in {timeout:.0f} s"
            f", {len(errors)} refused ({'; '.join(sorted(set(errors))[:3])}); "
            f"{_broker_hint(cfg)}, and publish again (the stream's dedup key drops copies)"
        )
    return sent


def _lag_consumer(cfg: TidemarkConfig):
    from confluent_kafka import Consumer

    return Consumer(client_config(cfg, **{"group.id": "tidemark-lag", "enable.auto.commit": False}))


def end_offsets(
    cfg: TidemarkConfig, topic: str, timeout: float = 10.0, consumer=None
) -> dict[int, tuple[int, int]]:
    """partition -> (earliest, next) offset on the broker (``consumer``: one to reuse)."""
    from confluent_kafka import TopicPartition

    mine = consumer is None
    consumer = _lag_consumer(cfg) if mine else consumer
    try:
        meta = consumer.list_topics(topic=topic, timeout=timeout)
        info = meta.topics.get(topic)
        if info is None or info.error is not None:
            raise TopicMissing(
                f"Kafka topic {topic} is not there "
                f"({info.error if info else 'unknown'}); {_broker_hint(cfg)}"
            )
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
            for p in sorted(info.partitions)
        }
    finally:
        if mine:
            consumer.close()


def committed_offsets(checkpoint: Where, topic: str) -> dict[int, int] | None:
    """partition -> the next offset after what the checkpoint's last committed batch read; None
    before the first commit. Read from the checkpoint's files (Spark's ``offsets/<batch>``)."""

    batch = last_committed_batch(checkpoint)
    if batch is None:
        return None
    try:
        lines = locations.read_text(Location.of(checkpoint) / "offsets" / str(batch)).splitlines()
    except OSError:
        return None
    for line in lines[2:]:  # version, metadata, then one line per source
        try:
            offsets = json.loads(line)
        except ValueError:
            continue
        if isinstance(offsets, dict) and topic in offsets:
            return {int(p): int(o) for p, o in offsets[topic].items()}
    return None


@dataclass(frozen=True)
class Lag:
    """How far a checkpoint is behind its topic."""

    topic: str
    partitions: dict[int, tuple[int, int]] = field(default_factory=dict)  # p -> (read to, end)
    oldest_unread_seconds: float | None = None  # age of the oldest record not read yet

    @property
    def rows(self) -> int:
        return sum(max(end - read, 0) for read, end in self.partitions.values())

    def as_dict(self) -> dict:
        return {
            "topic": self.topic,
            "rows": self.rows,
            "oldest_unread_seconds": self.oldest_unread_seconds,
            "partitions": {
                str(p): {"read_to": r, "end": e, "lag": max(e - r, 0)}
                for p, (r, e) in sorted(self.partitions.items())
            },
        }


def consumer_lag(cfg: TidemarkConfig, checkpoint: Where, topic: str, timeout: float = 10.0) -> Lag:
    """Per partition, the broker's end offset against what ``checkpoint`` committed, and the
    age of the oldest record not read yet (so a stopped consumer shows both rows and time)."""
    from confluent_kafka import TopicPartition

    consumer = _lag_consumer(cfg)  # one client for the offsets and the oldest unread record
    try:
        ends = end_offsets(cfg, topic, timeout, consumer)
        read = committed_offsets(checkpoint, topic) or {}
        partitions = {p: (read.get(p, earliest), end) for p, (earliest, end) in ends.items()}
        behind = [TopicPartition(topic, p, r) for p, (r, end) in partitions.items() if end > r]
        oldest = None
        if behind:
            consumer.assign(behind)
            stamps: dict[int, int] = {}
            deadline = time.monotonic() + timeout
            while len(stamps) < len(behind) and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is None or msg.error() is not None:
                    continue
                stamps.setdefault(msg.partition(), msg.timestamp()[1])
                consumer.pause([TopicPartition(topic, msg.partition())])
            if stamps:
                oldest = round(max(time.time() - min(stamps.values()) / 1000, 0.0), 1)
    finally:
        consumer.close()
    return Lag(topic, partitions, oldest)


@dataclass(frozen=True)
class Accounting:
    """Per partition of a Kafka-sourced stream: records the checkpoint read, against the rows in
    bronze and quarantine with that partition's offsets."""

    topic: str
    partitions: dict[int, dict] = field(default_factory=dict)

    @property
    def balanced(self) -> bool:
        return all(p["missing"] == 0 and p["doubled"] == 0 for p in self.partitions.values())

    @property
    def records(self) -> int:
        return sum(p["read"] for p in self.partitions.values())


def accounting(
    cfg: TidemarkConfig, schema: StreamSchema, start: dict[int, int] | None = None
) -> Accounting:
    """For each partition: the offsets from ``start`` (default: the topic's earliest) to where the
    checkpoint committed must each be in exactly one row of bronze or quarantine."""
    import pyarrow as pa
    from deltalake import QueryBuilder
    from deltalake.exceptions import TableNotFoundError

    topic = topic_of(cfg, schema)
    read_to = committed_offsets(cfg.paths.checkpoint(query_name(schema.name)), topic) or {}
    if start is None:
        start = {p: earliest for p, (earliest, _) in end_offsets(cfg, topic).items()}
    builder, parts = QueryBuilder(), []
    for layer in ("bronze", "quarantine"):
        try:
            builder.register(layer, locations.delta_table(cfg.paths.table(layer, schema.name)))
        except TableNotFoundError:
            continue
        parts.append(
            f'select "_source_partition" as p, "_source_offset" as o from {layer} '
            'where "_source_partition" is not null'
        )
    rows: dict[int, tuple[int, int]] = {}
    ranges = " or ".join(
        f"(p = {p} and o >= {start.get(p, 0)} and o < {end})" for p, end in read_to.items()
    )
    if parts and ranges:  # an offset in both tables, or twice in one, is doubled
        for r in pa.table(
            builder.execute(
                "select p, count(*) as n, count(distinct o) as d from ("
                + " union all ".join(parts)
                + f") where {ranges} group by p"
            )
        ).to_pylist():
            rows[int(r["p"])] = (int(r["n"]), int(r["d"]))
    out = {}
    for p in sorted(set(read_to) | set(rows)):
        first, last = start.get(p, 0), read_to.get(p, start.get(p, 0))
        n, distinct = rows.get(p, (0, 0))
        read = max(last - first, 0)
        out[p] = {
            "read": read,
            "rows": n,
            "missing": max(read - distinct, 0),
            "doubled": n - distinct,
        }
    return Accounting(topic, out)
