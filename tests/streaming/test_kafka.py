"""Kafka as a source, on a real broker (the project's KRaft broker, `kafka_broker` fixture).

Everything is counted against what the test produced: the lines it published, the offsets the
broker gave them, and an uninterrupted run of the same topic on a data root of its own.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from dataclasses import replace

import pytest
from helpers import is_valid_transaction

from streaming_jobs.core.checkpoints import last_committed_batch, last_planned_batch
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.storage.generator import GeneratorConfig, generate, publish_files
from streaming_jobs.core.checkpoints import query_name
from streaming_jobs.storage.kafka import (
    accounting,
    committed_offsets,
    consumer_lag,
    end_offsets,
    ensure_topic,
    publish,
    topic_of,
)
from streaming_jobs.storage.lake import read_table
from streaming_jobs.operations.health import check
from streaming_jobs.storage.registry import get_job, stream_schema
from streaming_jobs.runtime.runner import run_bronze, run_job

JOB = "failed_txn_velocity"
STREAM = "transactions"
pytestmark = pytest.mark.slow

WORKER = textwrap.dedent("""
    import sys
    from streaming_jobs.core.config import TidemarkConfig
    from streaming_jobs.storage.registry import get_job
    from streaming_jobs.runtime.runner import run_bronze, run_job
    from streaming_jobs.storage.spark import get_spark

    cfg = TidemarkConfig.from_env()
    spark = get_spark(cfg)
    run_bronze(spark, cfg, "transactions")
    if sys.argv[1] == "job":
        run_job(spark, cfg, get_job("failed_txn_velocity"))
""")


def _kill_mid_batch(
    cfg: TidemarkConfig, query: str, step: str, after_commits: int = 0, timeout: float = 300
) -> int:
    """Run bronze (and the job) in a process of its own; SIGKILL it once ``query`` has a batch
    planned and not committed, after ``after_commits`` committed ones. Returns that batch."""
    checkpoint = cfg.paths.checkpoint(query)
    proc = subprocess.Popen(
        [sys.executable, "-c", WORKER, step],
        env={**os.environ, "TIDEMARK_DATA_ROOT": str(cfg.data_root)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            planned, committed = last_planned_batch(checkpoint), last_committed_batch(checkpoint)
            done = 0 if committed is None else committed + 1
            if planned is not None and planned >= done and done >= after_commits:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return planned
            time.sleep(0.01)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    pytest.fail(f"{query} finished (or timed out) before a batch was seen in flight")


def _bronze_positions(spark, cfg) -> Counter:
    rows = (
        read_table(spark, cfg.paths.table("bronze", STREAM))
        .select("_source_partition", "_source_offset", "event_id")
        .collect()
    )
    return Counter((r[0], r[1], r[2]) for r in rows)


def _gold(spark, cfg) -> Counter:
    rows = read_table(spark, cfg.paths.table("gold", JOB)).collect()
    return Counter(tuple(sorted(r.asDict().items())) for r in rows)


@pytest.mark.long  # CI: the other Kafka tests and the kill -9 trials on landing files; make test-long
def test_exactly_once_into_bronze_and_gold_across_sigkill_mid_batch(
    spark, kafka_cfg, tmp_path, monkeypatch
):
    monkeypatch.setenv("TIDEMARK_KAFKA_MAX_OFFSETS_PER_TRIGGER", "500")  # many batches
    cfg = TidemarkConfig.from_env().with_data_root(kafka_cfg.data_root)
    gen = GeneratorConfig(stream=STREAM, events=2000, files=3, seed=23)
    files = generate(gen)
    lines = [line for f in files for line in f]
    assert publish_files(cfg, gen, files) == len(lines)
    topic = topic_of(cfg, stream_schema(STREAM))
    ends = end_offsets(cfg, topic)
    assert len(ends) == 3 and all(end > 0 for _, end in ends.values())  # all partitions used
    assert sum(end - first for first, end in ends.values()) == len(lines)

    # the uninterrupted run: the same topic, read by a data root of its own
    reference = cfg.with_data_root(tmp_path / "reference")
    run_bronze(spark, reference, STREAM)
    run_job(spark, reference, get_job(JOB))

    # killed in the middle of a bronze batch, then of a job batch, then run to the end
    killed_at = _kill_mid_batch(cfg, query_name(STREAM), "bronze", after_commits=2)
    assert killed_at >= 2  # a later batch: the first ones committed, this one did not
    assert committed_offsets(cfg.paths.checkpoint(query_name(STREAM)), topic) != {
        p: end for p, (_, end) in ends.items()
    }
    _kill_mid_batch(cfg, JOB, "job")
    run_bronze(spark, cfg, STREAM)
    run_job(spark, cfg, get_job(JOB))

    # every offset once, in bronze or quarantine, and all of them read
    acct = accounting(cfg, stream_schema(STREAM))
    assert acct.balanced and acct.records == len(lines), acct.partitions
    bronze = _bronze_positions(spark, cfg)
    assert max(bronze.values()) == 1
    assert sum(bronze.values()) == sum(is_valid_transaction(line) for line in lines)
    quarantined = read_table(spark, cfg.paths.table("quarantine", STREAM))
    assert sorted(r.raw_line for r in quarantined.collect()) == sorted(
        line for line in lines if not is_valid_transaction(line)
    )
    # the same rows at the same offsets as the uninterrupted run, and the same gold
    assert bronze == _bronze_positions(spark, reference)
    assert _gold(spark, cfg) == _gold(spark, reference) and sum(_gold(spark, cfg).values()) > 0


def test_malformed_payloads_are_quarantined_with_their_bytes(spark, kafka_cfg):
    cfg = kafka_cfg
    topic = topic_of(cfg, stream_schema(STREAM))
    assert ensure_topic(cfg, topic, partitions=1) == 1  # one partition: offsets in send order
    good = {
        "event_id": "e-1",
        "user_id": "u1",
        "card_id": "c1",
        "merchant": "m",
        "amount": 5.0,
        "currency": "EUR",
        "status": "FAILED",
        "event_time": "2026-01-01T00:00:00Z",
    }
    records = [
        json.dumps(good).encode(),
        b'\xff\xfe{"event_id": "e-2"}',  # not UTF-8
        b'{"event_id": "e-3"',  # cut short
        json.dumps({**good, "event_id": "e-4", "amount": "lots"}).encode(),
        b"",  # an empty value
    ]
    publish(cfg, topic, [(None, value) for value in records])
    run_bronze(spark, cfg, STREAM)

    bronze = read_table(spark, cfg.paths.table("bronze", STREAM)).collect()
    assert [
        (r.event_id, r._source_partition, r._source_offset, r._source_file) for r in bronze
    ] == [("e-1", 0, 0, f"kafka:{topic}")]
    quarantine = sorted(
        read_table(spark, cfg.paths.table("quarantine", STREAM)).collect(),
        key=lambda r: r._source_offset,
    )
    assert [(r._source_offset, bytes(r.raw_bytes)) for r in quarantine] == [
        (offset, records[offset]) for offset in (1, 2, 3, 4)
    ]
    reasons = [r.reason for r in quarantine]
    assert reasons[0].startswith("not valid UTF-8") and reasons[1] == "invalid JSON"
    assert reasons[2].startswith("amount is a JSON string") and reasons[3] == "empty line"
    assert accounting(cfg, stream_schema(STREAM)).partitions == {
        0: {"read": 5, "rows": 5, "missing": 0, "doubled": 0}
    }


def test_lag_is_recorded_and_raises_consumer_lag_when_consumption_stops(
    spark, kafka_cfg, monkeypatch
):
    monkeypatch.setenv("TIDEMARK_KAFKA_LAG_ROWS", "100")
    cfg = TidemarkConfig.from_env().with_data_root(kafka_cfg.data_root)
    gen = GeneratorConfig(stream=STREAM, events=600, files=2, seed=5)
    files = generate(gen)
    topic = topic_of(cfg, stream_schema(STREAM))
    checkpoint = cfg.paths.checkpoint(query_name(STREAM))

    sent = publish_files(cfg, gen, files, range(0, 1))
    run_bronze(spark, cfg, STREAM)
    assert consumer_lag(cfg, checkpoint, topic).rows == 0
    assert not [f for f in check(cfg, query_name(STREAM)) if f.kind == "consumer_lag"]

    more = publish_files(cfg, gen, files, range(1, 2))  # ...and nobody reads them
    lag = consumer_lag(cfg, checkpoint, topic)
    assert lag.rows == more > 100
    assert lag.oldest_unread_seconds is not None and 0 <= lag.oldest_unread_seconds < 120
    findings = [f for f in check(cfg, query_name(STREAM)) if f.kind == "consumer_lag"]
    assert len(findings) == 1 and f"{more:,} records of {topic} not read yet" in findings[0].message
    # the health sensor, as the daemon ticks it, raises the alert (other streams: no topic yet)
    assert _sensor_alerts(cfg) == {("bronze_transactions", "consumer_lag", "warning")}

    # the progress rows recorded what each batch left unread; the catch-up clears the finding
    run_bronze(spark, replace(cfg), STREAM)
    assert consumer_lag(cfg, checkpoint, topic).rows == 0
    assert not [f for f in check(cfg, query_name(STREAM)) if f.kind == "consumer_lag"]
    assert _sensor_alerts(cfg) == set()  # resolved
    from streaming_jobs.storage import ops_tables

    rows = ops_tables.read(
        cfg, "stream_progress", where=f"job = {ops_tables.literal(query_name(STREAM))}"
    )
    assert sum(r["num_input_rows"] for r in rows) == sent + more
    assert {r["source_lag_rows"] for r in rows} == {0}


def _sensor_alerts(cfg: TidemarkConfig) -> set[tuple[str, str, str]]:
    """One tick of the shipped health sensor; the open alerts it leaves."""
    from dagster import DagsterInstance, build_sensor_context

    from orchestration.defs.ops.sensors import checkpoint_health_sensor
    from orchestration.lib.resources import TidemarkResource
    from streaming_jobs.operations import alerts

    context = build_sensor_context(
        instance=DagsterInstance.ephemeral(),
        resources={"tidemark": TidemarkResource(data_root=str(cfg.data_root))},
    )
    checkpoint_health_sensor(context)
    return {(r["job"], r["kind"], r["severity"]) for r in alerts.open_alerts(cfg)}


def test_unreachable_brokers_are_a_finding(spark, kafka_cfg, monkeypatch):
    monkeypatch.setenv("TIDEMARK_KAFKA_BOOTSTRAP", "127.0.0.1:1")  # nothing listens there
    cfg = TidemarkConfig.from_env().with_data_root(kafka_cfg.data_root)
    kinds = [f.kind for f in check(cfg, query_name(STREAM))]
    assert kinds == ["source_unreachable"]


TOKEN_CHECK = textwrap.dedent("""
    import json, sys
    from pyspark.sql import SparkSession
    jars, bootstrap, topic = sys.argv[1], sys.argv[2], sys.argv[3]
    spark = (SparkSession.builder.master("local[1]").config("spark.jars", jars)
             .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
             .config("spark.ui.enabled", "false").getOrCreate())
    rows = spark.createDataFrame([(str(i), json.dumps({"n": i})) for i in range(50)], "key string, value string")
    rows.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", topic).save()
    back = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).option("startingOffsets", "earliest").load())
    print("READ", back.count(), sorted(int(json.loads(r.v)["n"]) for r in back.selectExpr("cast(value as string) v").collect()) == list(range(50)))
""")


def test_the_4_0_0_token_provider_works_with_spark_4_2(kafka_cfg):
    """The fallback for mirrors without the 4.2.0 token provider (docs/configuration.md, "Jars"): Spark 4.2's
    connector with the 4.0.0 jar writes and reads a topic."""
    from streaming_jobs.storage.spark import TOKEN_PROVIDER, cached_jars, kafka_token_provider

    old = kafka_token_provider(kafka_cfg, versions=("4.0.0",))
    assert old.name.endswith("-4.0.0.jar")
    name = TOKEN_PROVIDER.split(":")[1]
    jars = [j for j in cached_jars(kafka_cfg) if name not in j] + [str(old)]
    topic = kafka_cfg.kafka.topic_prefix + "token"
    ensure_topic(kafka_cfg, topic, partitions=2)
    done = subprocess.run(
        [sys.executable, "-c", TOKEN_CHECK, ",".join(jars), kafka_cfg.kafka.bootstrap, topic],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
    )
    assert "READ 50 True" in done.stdout, done.stderr[-3000:]


def test_the_broker_refuses_a_taken_port_with_what_to_do(tmp_path):
    import socket

    from streaming_jobs.services.kafka_broker import start
    from streaming_jobs.services.lifecycle import ServiceError

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cfg = TidemarkConfig.from_env(
            {"TIDEMARK_DATA_ROOT": str(tmp_path), "TIDEMARK_KAFKA_PORT": str(port)}
        )
        with pytest.raises(
            ServiceError, match=f"port {port} on 127.0.0.1 is taken.*TIDEMARK_KAFKA_PORT"
        ):
            start(cfg)
    assert not (tmp_path / "kafka" / "broker.json").exists()
