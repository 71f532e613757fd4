"""The pure parts of the Kafka source: record keys, the lag a progress event records, the
committed offsets a checkpoint holds (files only: no broker, no Spark)."""

from __future__ import annotations

import json

from streaming_jobs.storage.generator import record_key
from streaming_jobs.storage.kafka import committed_offsets
from streaming_jobs.runtime.progress import kafka_lag, progress_row


def test_a_record_is_keyed_by_the_streams_key_and_a_malformed_line_by_nothing():
    line = json.dumps({"sensor_id": "s-1", "read_at": "2026-01-01T00:00:00Z", "x": 1})
    assert record_key(line, ("sensor_id", "read_at")) == b"s-1|2026-01-01T00:00:00Z"
    assert record_key('{"sensor_id": "s-1"', ("sensor_id",)) is None  # not JSON
    assert record_key('{"other": 1}', ("sensor_id",)) is None  # no key field
    assert record_key(line, None) is None


def test_lag_is_what_the_partitions_held_beyond_where_the_batch_stopped():
    kafka = {
        "description": "KafkaV2[Subscribe[tidemark.orders]]",
        "startOffset": {"tidemark.orders": {"0": 10, "1": 4}},
        "endOffset": {"tidemark.orders": {"0": 40, "1": 9}},
        "latestOffset": {"tidemark.orders": {"0": 100, "1": 9}},
    }
    assert kafka_lag([kafka]) == 60
    as_text = {**kafka, **{k: json.dumps(kafka[k]) for k in ("endOffset", "latestOffset")}}
    assert kafka_lag([as_text]) == 60
    delta = {
        "description": "DeltaSource[file:/lake/bronze/orders]",
        "startOffset": None,
        "endOffset": {"reservoirVersion": 3, "index": -1},
    }
    assert kafka_lag([delta]) is None
    row = progress_row(
        "bronze_orders",
        {
            "id": "q",
            "runId": "r",
            "batchId": 2,
            "timestamp": "2026-11-23T00:00:00.000Z",
            "sources": [kafka],
        },
    )
    assert row["source_lag_rows"] == 60


def test_committed_offsets_are_those_of_the_last_committed_batch(tmp_path):
    checkpoint = tmp_path / "bronze_orders"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "commits").mkdir()
    assert committed_offsets(checkpoint, "tidemark.orders") is None  # nothing committed yet
    for batch, offsets in ((0, {"0": 5, "1": 7}), (1, {"0": 9, "1": 7})):
        (checkpoint / "offsets" / str(batch)).write_text(
            'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1}\n'
            + json.dumps({"tidemark.orders": offsets})
            + "\n"
        )
    (checkpoint / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":0}\n')
    # batch 1 is planned, not committed: what was read is batch 0's end
    assert committed_offsets(checkpoint, "tidemark.orders") == {0: 5, 1: 7}
    assert committed_offsets(checkpoint, "another.topic") is None


def test_a_cluster_id_never_starts_with_a_dash(monkeypatch):
    """The storage tool reads ``-t -xyz`` as a missing id plus an option (CI failed so, 1 start
    in 64); an id that would start with ``-`` is drawn again."""
    import base64
    import uuid

    from streaming_jobs.services import kafka_broker

    dash = uuid.UUID(bytes=bytes([0xF8]) + bytes(15))  # 0xF8 >> 2 == 62: '-' in URL-safe base64
    plain = uuid.UUID(bytes=bytes([0x04]) + bytes(15))
    assert base64.urlsafe_b64encode(dash.bytes).decode().startswith("-")
    drawn = iter([dash, dash, plain])
    monkeypatch.setattr(kafka_broker.uuid, "uuid4", lambda: next(drawn))
    found = kafka_broker._cluster_id()
    assert found == base64.urlsafe_b64encode(plain.bytes).rstrip(b"=").decode()
    assert len(found) == 22 and not found.startswith("-")
