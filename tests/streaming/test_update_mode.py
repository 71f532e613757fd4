"""Update-mode jobs: each micro-batch upserted with an idempotent MERGE on the job's keys."""

from __future__ import annotations

from collections import Counter

from pyspark.sql import functions as F

from helpers import land, txn
from streaming_jobs.spec import JobSpec, StateBound
from streaming_jobs.storage.lake import read_table
from streaming_jobs.runtime.runner import run_bronze, run_job


def failed_per_user(events, *, watermark):
    """A running count of FAILED transactions per user (a test job in update mode)."""
    return (
        events.withWatermark("event_time", watermark)
        .where(F.col("status") == "FAILED")
        .groupBy("user_id")
        .agg(F.count(F.lit(1)).alias("failed"))
    )


SPEC = JobSpec(
    name="test_failed_per_user",
    description="running FAILED count per user",
    source="transactions",
    keys=("user_id",),
    measures=("failed",),
    event_time="event_time",
    state=StateBound(watermark="10 minutes"),
    output_mode="update",
    build=failed_per_user,
)


def test_upserts_hold_the_latest_value_and_a_replayed_batch_changes_nothing(spark, cfg):
    from delta.tables import DeltaTable

    wave_1 = [
        txn("a", "u1", 1),
        txn("b", "u1", 2),
        txn("c", "u2", 3),
        txn("d", "u2", 4, "APPROVED"),
    ]
    wave_2 = [txn("e", "u1", 5), txn("f", "u3", 6)]
    land(cfg, "w1.jsonl", wave_1)
    run_bronze(spark, cfg, "transactions")
    first = run_job(spark, cfg, SPEC)
    land(cfg, "w2.jsonl", wave_2)
    run_bronze(spark, cfg, "transactions")
    second = run_job(spark, cfg, SPEC)

    target = cfg.paths.table("gold", SPEC.name)
    expected = Counter(e["user_id"] for e in wave_1 + wave_2 if e["status"] == "FAILED")
    assert {r.user_id: r.failed for r in read_table(spark, target).collect()} == dict(expected)
    assert first.output_rows == 2 and second.output_rows == 2  # u1 updated, u3 inserted

    merges = (
        lambda: DeltaTable.forPath(spark, str(target))
        .history()
        .where("operation = 'MERGE'")
        .count()
    )
    before = merges()
    checkpoint = cfg.paths.checkpoint(SPEC.name)
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    (checkpoint / "commits" / str(last)).unlink()
    (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)
    replay = run_job(spark, cfg, SPEC)
    assert replay.batches >= 1  # the uncommitted batch ran again...
    assert merges() == before  # ...and Delta skipped its MERGE as already committed
    assert {r.user_id: r.failed for r in read_table(spark, target).collect()} == dict(expected)
