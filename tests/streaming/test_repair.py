"""`tidemark repair bronze_<stream>`: an ingestion checkpoint's torn newest file set aside when
bronze and quarantine show it is safe, refused when it is not; each time the next run leaves
every landed line in bronze or quarantine exactly once. Landing files on a local disk and on
the project's S3 server, and a Kafka topic on the project's broker (its positions are the
topic's offsets, not a file log)."""

from __future__ import annotations

import json
from argparse import Namespace
from collections import Counter

import pytest

from helpers import fail_bronze_batch, failures_job, land, on_store, txn
from streaming_jobs.core import locations
from streaming_jobs.core.locations import Location
from streaming_jobs.operations.health import check_checkpoint
from streaming_jobs.operations.savepoints import mend_corrupt
from streaming_jobs.runtime.runner import StreamRunError, run_bronze
from streaming_jobs.storage.kafka import ensure_topic, publish, topic_of
from streaming_jobs.storage.lake import read_table
from streaming_jobs.storage.registry import stream_schema

STREAM, QUERY = "transactions", "bronze_transactions"
BAD = "{not json"
pytestmark = pytest.mark.slow


def _tables(spark, cfg) -> tuple[Counter, Counter]:
    """Each bronze event id, and each quarantined raw line, with how often it is there."""
    bronze = read_table(spark, cfg.paths.table("bronze", STREAM)).select("event_id").collect()
    bad = read_table(spark, cfg.paths.table("quarantine", STREAM)).select("raw_line").collect()
    return Counter(r.event_id for r in bronze), Counter(r.raw_line for r in bad)


def _wave(cfg, name: str, count: int, landed: list) -> None:
    """``count`` transactions and one malformed line: landed as ``<name>.jsonl``, or published
    to the stream's topic when Kafka is its source."""
    events = [txn(f"{name}{i}", "u1", i) for i in range(count)]
    lines = [*(json.dumps(e) for e in events), f"{BAD} {name}"]
    if cfg.kafka.source == "kafka":
        topic = topic_of(cfg, stream_schema(STREAM))
        assert publish(cfg, topic, [(None, line.encode()) for line in lines]) == len(lines)
    else:
        land(cfg, f"{name}.jsonl", lines, stream=STREAM)
    landed.append((events, f"{BAD} {name}"))


def _expected(landed) -> tuple[Counter, Counter]:
    return (
        Counter(e["event_id"] for events, _ in landed for e in events),
        Counter(bad for _, bad in landed),
    )


def _tear(checkpoint: Location, file: str) -> bytes:
    """Overwrite ``file`` (e.g. ``offsets/2``) with what a torn write leaves; its bytes."""
    before = locations.read_bytes(checkpoint / file)
    locations.write_bytes(checkpoint / file, b'v1\n{"logOff')
    return before


def _alert_says(cfg) -> str:
    findings = mend_corrupt(cfg, QUERY, check_checkpoint(cfg, QUERY), ingestion=True)
    return " ".join(f.message for f in findings if f.kind == "checkpoint_corrupt")


def _alert_says_of(cfg, job: str) -> str:
    findings = mend_corrupt(cfg, job, check_checkpoint(cfg, job))
    return " ".join(f.message for f in findings if f.kind == "checkpoint_corrupt")


@pytest.mark.parametrize("where", ["local", "store", "kafka"])
def test_a_torn_newest_checkpoint_file_is_set_aside_when_safe_and_refused_when_not(
    spark, cfg, capsys, monkeypatch, where, request
):
    from orchestration.cli import operate

    if where == "store":
        cfg = on_store(spark, cfg, request.getfixturevalue("s3_bucket"))
    if where == "kafka":
        cfg = request.getfixturevalue("kafka_cfg")
        assert ensure_topic(cfg, topic_of(cfg, stream_schema(STREAM)), partitions=1) == 1
    checkpoint = Location.of(cfg.paths.checkpoint(QUERY))
    landed: list = []
    _wave(cfg, "a", 4, landed)
    assert run_bronze(spark, cfg, STREAM).checkpoint_batch_id == 0
    if where == "kafka":  # the positions are the topic's offsets
        assert topic_of(cfg, stream_schema(STREAM)) in locations.read_text(checkpoint / "offsets/0")

    # batch 1 written to both tables, then the machine went down before its commit, and its
    # offsets file is torn: planned again it could take more files than were written, which
    # the tables' key would skip. Refused, and the checkpoint left as it is.
    _wave(cfg, "b", 3, landed)
    with monkeypatch.context() as patch:
        fail_bronze_batch(patch, after_write=True)
        with pytest.raises(StreamRunError):
            run_bronze(spark, cfg, STREAM)
    backup = _tear(checkpoint, "offsets/1")
    said = _alert_says(cfg)
    assert "offsets/1 is unreadable and batch 1 was already written" in said
    with pytest.raises(operate.OperationError, match="file back from a backup"):
        operate.repair(cfg, Namespace(query=QUERY))
    assert locations.read_bytes(checkpoint / "offsets" / "1") != backup  # untouched
    # put back as said, the batch runs again and writes nothing twice
    locations.write_bytes(checkpoint / "offsets" / "1", backup)
    assert run_bronze(spark, cfg, STREAM).checkpoint_batch_id == 1
    assert _tables(spark, cfg) == _expected(landed)

    # batch 2 planned, and the machine went down before it wrote anything: its torn offsets
    # file is set aside, and it is planned again with the files landed since
    _wave(cfg, "c", 2, landed)
    with monkeypatch.context() as patch:
        fail_bronze_batch(patch, after_write=False)
        with pytest.raises(StreamRunError):
            run_bronze(spark, cfg, STREAM)
    _tear(checkpoint, "offsets/2")
    said = _alert_says(cfg)
    assert "offsets/2 is set aside by the next run's start" in said
    assert f"'tidemark repair {QUERY}'" in said
    capsys.readouterr()
    assert operate.repair(cfg, Namespace(query=QUERY)) == 0
    shown = capsys.readouterr().out
    assert f"{QUERY}: offsets/2 was unreadable and is set aside" in shown
    assert "their newest write of this query is batch 1" in shown
    kept = Location.of(cfg.paths.checkpoints) / ".replaced"
    [folder] = [n for n in locations.names(kept) if n.startswith(f"{QUERY}-repair-")]
    assert locations.read_bytes(kept / folder / "offsets" / "2").startswith(b'v1\n{"logOff')
    _wave(cfg, "d", 2, landed)
    assert run_bronze(spark, cfg, STREAM).checkpoint_batch_id == 2
    assert _tables(spark, cfg) == _expected(landed)

    # the newest commits file torn: the batch runs again from its positions, written once
    _tear(checkpoint, "commits/2")
    assert operate.repair(cfg, Namespace(query=QUERY)) == 0
    assert "commits/2 was unreadable and is set aside" in capsys.readouterr().out
    assert _alert_says(cfg) == ""  # healthy again
    _wave(cfg, "e", 2, landed)
    run_bronze(spark, cfg, STREAM)
    assert _tables(spark, cfg) == _expected(landed)

    # nothing torn: nothing done; a torn file older than the newest: refused
    assert operate.repair(cfg, Namespace(query=QUERY)) == 0
    assert "nothing to mend" in capsys.readouterr().out
    _tear(checkpoint, "commits/0")
    with pytest.raises(operate.OperationError, match="Only the newest batch's file"):
        operate.repair(cfg, Namespace(query=QUERY))
    with pytest.raises(operate.OperationError, match="no such ingestion or job"):
        operate.repair(cfg, Namespace(query="bronze_nowhere"))


# fails while the test's flag file exists: a batch that never reaches gold
FAILING = failures_job(
    "failing_failures",
    """
    if os.path.exists(FLAG):
        raise RuntimeError("the machine went down here (injected by the test)")
    return merchant
    """,
)


@pytest.mark.parametrize("where", ["local", "store"])
def test_a_jobs_torn_newest_offsets_is_set_aside_when_its_batch_never_reached_gold(
    spark, cfg, tmp_path, monkeypatch, where, request
):
    """A keyed-state job's batch planned and the machine down before it wrote to gold, its
    offsets file torn: the next run's start sets it aside, plans the batch again from the
    state the batch before left (with what landed since), and gold holds every closed window
    once. A torn offsets file whose batch gold holds is refused, naming the savepoint. On a
    local disk (gold's own marker) and on the project's S3 server (Delta's key)."""
    from streaming_jobs.core.checkpoints import (
        batch_ids,
        last_committed_batch,
        last_planned_batch,
        query_id,
    )
    from streaming_jobs.core.delta_log import batch_marks, sink_app_id
    from streaming_jobs.runtime.runner import run_job
    from streaming_jobs.storage.registry import get_job
    from streaming_jobs.storage.repairs import RepairRefused, plan

    if where == "store":
        cfg = on_store(spark, cfg, request.getfixturevalue("s3_bucket"))
    folder = tmp_path / "jobs"
    folder.mkdir()
    (folder / "failing_failures.py").write_text(FAILING)
    flag = tmp_path / "down"
    monkeypatch.setenv("TIDEMARK_JOBS_PATH", str(folder))
    monkeypatch.setenv("TIDEMARK_TEST_FLAG", str(flag))
    job = "failing_failures"
    spec = get_job(job)
    checkpoint = Location.of(cfg.paths.checkpoint(job))
    events: list[dict] = []

    def wave(minutes: range) -> None:
        new = [txn(f"t{m:03d}", "u1", m, status="FAILED" if m % 3 else "APPROVED") for m in minutes]
        new = [{**e, "merchant": f"m{i % 2}"} for i, e in zip(minutes, new)]
        land(cfg, f"w{minutes.start}.jsonl", new)
        events.extend(new)
        run_bronze(spark, cfg, STREAM)

    def closed_windows() -> Counter:
        """Per (merchant, window start minute), the FAILED events of every window the
        watermark (the newest event less 5 minutes) has closed, counted here."""
        newest = max(int(e["event_id"][1:]) for e in events)
        return Counter(
            (e["merchant"], m // 10 * 10)
            for e in events
            if e["status"] == "FAILED"
            and (m := int(e["event_id"][1:])) // 10 * 10 + 10 <= newest - 5
        )

    def gold() -> Counter:
        rows = read_table(spark, cfg.paths.table("gold", job)).collect()
        return Counter({(r.merchant, r.window_start.minute): r.failures for r in rows})

    wave(range(0, 20))
    run_job(spark, cfg, spec)
    wave(range(20, 30))
    flag.write_text("")
    with pytest.raises(StreamRunError):
        run_job(spark, cfg, spec)  # its next batch planned, and failed before gold
    flag.unlink()
    planned = last_planned_batch(checkpoint)
    assert last_committed_batch(checkpoint) == planned - 1
    _tear(checkpoint, f"offsets/{planned}")
    assert plan(cfg, job)[:2] == (f"offsets/{planned}", planned)
    wave(range(30, 40))  # landed since: the batch planned again reads it too
    assert run_job(spark, cfg, spec).checkpoint_batch_id >= planned
    assert gold() == closed_windows() and len(gold()) == 6
    kept = Location.of(cfg.paths.checkpoints) / ".replaced"
    [folder_] = [n for n in locations.names(kept) if n.startswith(f"{job}-repair-")]
    set_aside = locations.read_bytes(kept / folder_ / "offsets" / str(planned))
    assert set_aside.startswith(b'v1\n{"logOff')

    # the newest batch gold holds, and the machine down before its commit, its offsets file
    # torn: refused (planned again it could read more than gold holds of it), the file left
    app = sink_app_id(spec, query_id(checkpoint))
    written = max(
        batch for writer, batch in batch_marks(cfg.paths.table("gold", job)) if writer == app
    )
    for log in ("offsets", "commits"):
        for batch in batch_ids(checkpoint / log):
            if batch > written or (log == "commits" and batch == written):
                for name in (str(batch), f".{batch}.crc"):
                    if locations.is_file(checkpoint / log / name):
                        locations.delete(checkpoint / log / name)
    _tear(checkpoint, f"offsets/{written}")
    with pytest.raises(RepairRefused, match=f"tidemark restore {job}"):
        plan(cfg, job)
    assert locations.read_bytes(checkpoint / "offsets" / str(written)) == b'v1\n{"logOff'
    # no savepoint: the alert names the rebuild
    assert f"'tidemark rebuild {job} --from-scratch --force'" in _alert_says_of(cfg, job)
