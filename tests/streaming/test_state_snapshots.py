"""State snapshots outlive the run that made them.

RocksDB state with changelog checkpointing: every commit writes the batch's changes
(``<version>.changelog``); every ``minDeltasForSnapshot`` (10) versions a commit also makes a
snapshot of the whole store, which Spark's maintenance thread uploads later (``<version>.zip``).
A process that ends before that upload loses the snapshot, and every later run of the job replays
all the changelogs since the last uploaded one: a start-up cost that grows with the job's
history. An incremental run therefore returns only once the snapshot its commits made is in the
checkpoint (runner.py, ``settle_snapshots``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import click, land
from streaming_jobs.storage.registry import get_job
from streaming_jobs.runtime.runner import run_bronze, run_job

MIN_DELTAS = 10  # Spark's default spark.sql.streaming.stateStore.minDeltasForSnapshot


def versions(store: Path, suffix: str) -> list[int]:
    return sorted(
        int(p.name.split(".")[0].split("_")[0]) for p in store.iterdir() if p.name.endswith(suffix)
    )


@pytest.mark.slow
def test_a_run_whose_commit_made_a_state_snapshot_returns_with_it_uploaded(spark, cfg):
    spec = get_job("events_by_type")
    state = cfg.paths.checkpoint(spec.name) / "state"
    uploaded_in = set()
    for wave in range(6):  # two versions a run (a batch, then the watermark's): a snapshot at 10
        land(
            cfg,
            f"w{wave}.jsonl",
            [click(f"w{wave}-{i}", f"u{i % 3}", wave * 3 + i / 4) for i in range(8)],
            stream="clicks",
        )
        run_bronze(spark, cfg, "clicks")
        run_job(spark, cfg, spec)
        # as the run returns (its process may end now): no store is MIN_DELTAS versions past
        # its newest snapshot, the state a new process would have to rebuild from changelogs
        stores = sorted({p.parent for p in state.rglob("*.changelog")})
        # one deduplication store per shuffle partition
        assert len(stores) == cfg.spark.shuffle_partitions
        for store in stores:
            behind = versions(store, ".changelog")[-1] - max(versions(store, ".zip") or [0])
            assert behind < MIN_DELTAS, (wave, store, sorted(p.name for p in store.iterdir()))
            if versions(store, ".zip"):
                uploaded_in.add(store)
    # the case arose in every store: each made a snapshot, and it was uploaded before the run
    # that made it returned
    assert uploaded_in == set(stores)


@pytest.mark.slow
def test_a_continuous_run_stopped_right_after_a_snapshot_leaves_it_uploaded(spark, cfg):
    """A continuous run (Dagster's, `tidemark continuous`) stopped just after a commit made a
    snapshot: the stop returns only once it is uploaded, as an incremental run does. Without
    that wait the process could end first, and the next start would replay every changelog."""
    import time

    from streaming_jobs.core.checkpoints import last_committed_batch, snapshots_pending
    from streaming_jobs.operations.continuous import run_continuous

    spec = get_job("events_by_type")
    checkpoint = cfg.paths.checkpoint(spec.name)
    began = time.time()
    landed: list[int | None] = []  # the job's last committed batch when each wave landed
    pending_at_stop: list = []  # Locations of state stores

    def should_stop() -> bool:
        pending = snapshots_pending(checkpoint, began, MIN_DELTAS)
        if pending:  # this commit made a snapshot: stop at once, before maintenance runs
            pending_at_stop.extend(pending)
            return True
        done = last_committed_batch(checkpoint)
        if not landed or done != landed[-1]:  # a wave per commit of the job: new versions
            wave = len(landed)
            land(
                cfg,
                f"w{wave}.jsonl",
                [click(f"w{wave}-{i}", f"u{i % 3}", wave * 3 + i / 4) for i in range(8)],
                stream="clicks",
            )
            landed.append(done)
        return False

    result = run_continuous(
        spark,
        cfg,
        streams=["clicks"],
        jobs=[spec.name],
        trigger_seconds=1.0,
        flush_seconds=2.0,
        max_seconds=300,
        should_stop=should_stop,
        holder="test",
    )
    assert result.stopped_by == "stop requested", (result.stopped_by, landed)
    assert pending_at_stop, "the run stopped without a snapshot made"
    # as the run returns (its process may end now): every snapshot made is in the checkpoint
    assert snapshots_pending(checkpoint, began, MIN_DELTAS) == []
    for store in (pending.path for pending in pending_at_stop):
        assert versions(store, ".zip"), sorted(p.name for p in store.iterdir())
        assert versions(store, ".changelog")[-1] - max(versions(store, ".zip")) < MIN_DELTAS
