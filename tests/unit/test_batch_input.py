"""What a planned batch reads, from a checkpoint's own offsets and source log
(`streaming_jobs.core.checkpoints.batch_input`): the hold's message names it. The file and
Delta cases also run on real checkpoints in test_expectations; Kafka's offsets are written
here as Spark writes them."""

import json

from streaming_jobs.core.checkpoints import batch_input

HEADER = 'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}\n'


def _offsets(checkpoint, batch, *sources):
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(s) for s in sources]
    (checkpoint / "offsets" / str(batch)).write_text(HEADER + "\n".join(lines))


def test_kafka_offsets_are_named_per_partition(tmp_path):
    _offsets(tmp_path, 4, {"orders": {"0": 10, "1": 7}})
    _offsets(tmp_path, 5, {"orders": {"0": 25, "1": 7}})
    assert batch_input(tmp_path, 5) == [
        "topic orders offsets (partition: from to) 0: 10 to 25, 1: 7 to 7"
    ]


def test_a_file_source_batch_in_a_compaction_file_and_a_gone_batch(tmp_path):
    _offsets(tmp_path, 8, {"logOffset": 8})
    _offsets(tmp_path, 9, {"logOffset": 9})
    log = tmp_path / "sources" / "0"
    log.mkdir(parents=True)
    entries = [
        {"path": "file:///land/a.jsonl", "timestamp": 1, "batchId": 8},
        {"path": "file:///land/b.jsonl", "timestamp": 2, "batchId": 9},
        {"path": "file:///land/c%20d.jsonl", "timestamp": 3, "batchId": 9},
    ]
    (log / "9.compact").write_text("v1\n" + "\n".join(json.dumps(e) for e in entries))
    assert batch_input(tmp_path, 9) == ["2 landed file(s): /land/b.jsonl, /land/c d.jsonl"]
    assert batch_input(tmp_path, 10) == []  # no offsets: nothing to say
