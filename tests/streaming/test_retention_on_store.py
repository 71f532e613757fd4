"""Maintenance with the data root on the project's real S3-compatible server: OPTIMIZE and
VACUUM rewrite and free the lake's files without changing a row, each table under its writer's
lease (one writer per table on a store), and a table whose writer runs is skipped, said so."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import replace

import pytest
import scenarios

from streaming_jobs.core.checkpoints import checkpoint_lock, query_name
from streaming_jobs.operations import retention
from streaming_jobs.storage.lake import read_table
from streaming_jobs.storage.spark import use_object_store

pytestmark = pytest.mark.slow


def _rows(spark, table) -> Counter:
    return Counter(tuple(r) for r in read_table(spark, table).collect())


def test_maintenance_on_the_store_keeps_every_row_and_its_writers_apart(spark, cfg, s3_bucket):
    _, s3_cfg, _, bucket = s3_bucket
    store = replace(cfg, s3=s3_cfg.s3).with_data_root(f"s3://{bucket}/root")
    store = replace(store, ops=replace(store.ops, vacuum_retain_hours=0.0, log_retain_hours=0.0))
    use_object_store(spark, store)
    scenarios.run_waves(spark, store)  # bronze and gold in two commits each
    bronze = store.paths.table("bronze", "transactions")
    gold = store.paths.table("gold", "failed_txn_velocity")
    before = {t: _rows(spark, t) for t in (bronze, gold)}
    assert retention._disk(bronze)[0] >= 2

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
    assert "failed_txn_velocity is running" in steps[("gold/failed_txn_velocity", "skipped")].detail
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
