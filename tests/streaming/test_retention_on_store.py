"""Maintenance with the data root on the project's real S3-compatible server: OPTIMIZE and
VACUUM rewrite and free the lake's files without changing a row, each table under its writer's
lease (one writer per table on a store). A table whose writer runs is maintained by that
writer's continuous run, asked by request; a writer that takes no request is left alone, said
so."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import replace

import pytest
import scenarios
from helpers import on_store

from streaming_jobs.core.checkpoints import checkpoint_lock, query_name
from streaming_jobs.operations import retention
from streaming_jobs.storage.lake import read_table

pytestmark = pytest.mark.slow


def _rows(spark, table) -> Counter:
    return Counter(tuple(r) for r in read_table(spark, table).collect())


def _waves_run(spark, cfg, s3_bucket):
    """A data root on the store (nothing kept by VACUUM or log expiry) where both waves ran:
    bronze and gold in two commits each; (its config, bronze, gold, their rows)."""
    store = on_store(spark, cfg, s3_bucket)
    store = replace(store, ops=replace(store.ops, vacuum_retain_hours=0.0, log_retain_hours=0.0))
    scenarios.run_waves(spark, store)
    bronze = store.paths.table("bronze", "transactions")
    gold = store.paths.table("gold", "failed_txn_velocity")
    assert retention._disk(bronze)[0] >= 2
    return store, bronze, gold, {t: _rows(spark, t) for t in (bronze, gold)}


def test_maintenance_on_the_store_keeps_every_row_and_its_writers_apart(
    spark, cfg, s3_bucket, monkeypatch
):
    monkeypatch.setattr(retention, "MAINTENANCE_PICKUP_SECONDS", 3.0)  # no one takes it here
    store, bronze, gold, before = _waves_run(spark, cfg, s3_bucket)

    # the job runs (its lease held) while maintenance does its round
    held, release = threading.Event(), threading.Event()

    def job_running() -> None:
        with checkpoint_lock(store.paths.checkpoint("failed_txn_velocity"), "a running job"):
            held.set()
            release.wait(300)

    runner = threading.Thread(target=job_running)
    runner.start()
    held.wait(60)
    try:
        busy = retention.maintain(spark, store)
    finally:
        release.set()
        runner.join(60)
    steps = {(s.target, s.action): s for s in busy.steps}
    assert not busy.failed, [s.detail for s in busy.failed]
    skipped = steps[("gold/failed_txn_velocity", "skipped")].detail
    assert "failed_txn_velocity is running and took no maintenance request" in skipped
    assert ("bronze/transactions", "optimize") in steps  # its writer was not running

    done = retention.maintain(spark, store)
    steps = {(s.target, s.action): s for s in done.steps}
    assert not done.failed, [s.detail for s in done.failed]
    assert ("gold/failed_txn_velocity", "vacuum") in steps
    # bronze's small files were bin-packed, then VACUUM (0 h kept) freed the old ones
    assert retention._disk(bronze)[0] == 1
    assert {t: _rows(spark, t) for t in (bronze, gold)} == before
    # maintenance gave the writers' leases back
    with checkpoint_lock(store.paths.checkpoint(query_name("transactions")), "after"):
        pass


def test_a_continuous_run_on_the_store_maintains_its_own_tables_when_asked(spark, cfg, s3_bucket):
    """On a store a table has one writer at a time, so a continuous run's tables were never
    maintained while it ran. Now maintenance asks the run, which compacts and vacuums them in
    its own driver between batches."""
    from streaming_jobs.operations.continuous import run_continuous

    store, bronze, gold, before = _waves_run(spark, cfg, s3_bucket)

    stop, started, runs = threading.Event(), threading.Event(), []

    def host() -> None:
        runs.append(
            run_continuous(
                spark,
                store,
                streams=["transactions"],
                jobs=["failed_txn_velocity"],
                trigger_seconds=1.0,
                should_stop=lambda: started.set() or stop.is_set(),
                holder="the maintenance test's continuous run",
                flush_seconds=5.0,
            )
        )

    runner = threading.Thread(target=host)
    runner.start()
    try:
        started.wait(300)
        report = retention.maintain(spark, store)
    finally:
        stop.set()
        runner.join(300)
    steps = {(s.target, s.action): s for s in report.steps}
    assert not report.failed, [s.detail for s in report.failed]
    for target, owner in (
        ("bronze/transactions", query_name("transactions")),
        ("gold/failed_txn_velocity", "failed_txn_velocity"),
    ):
        assert f"(by {owner}'s run)" in steps[(target, "vacuum")].detail, steps
    assert ("bronze/transactions", "optimize") in steps
    assert runs and "gold/failed_txn_velocity vacuum" in runs[0].maintained, runs
    assert retention._disk(bronze)[0] == 1  # bin-packed, the old files vacuumed
    assert {t: _rows(spark, t) for t in (bronze, gold)} == before
    assert not retention.pending_maintenance(store, "failed_txn_velocity")
