"""Kafka → bronze → gold with the data root on the project's real S3-compatible server: the
stream's tables, its checkpoints and the ops tables are objects in a bucket, and the result is
the result of the same topic read by a data root on the local disk."""

from __future__ import annotations

from collections import Counter

import pytest
from helpers import is_valid_transaction, on_store

from streaming_jobs.core import locations
from streaming_jobs.core.checkpoints import query_name
from streaming_jobs.operations.rebuild import rebuild
from streaming_jobs.runtime.runner import run_bronze, run_job
from streaming_jobs.storage import ops_tables
from streaming_jobs.storage.generator import GeneratorConfig, generate, publish_files
from streaming_jobs.storage.kafka import accounting
from streaming_jobs.storage.lake import read_table
from streaming_jobs.storage.registry import get_job, stream_schema

JOB, STREAM = "failed_txn_velocity", "transactions"
pytestmark = pytest.mark.slow


def _rows(spark, table, columns=None) -> Counter:
    frame = read_table(spark, table)
    return Counter(tuple(r) for r in frame.select(*(columns or sorted(frame.columns))).collect())


def test_kafka_into_bronze_and_gold_on_the_store_as_on_disk(spark, kafka_cfg, s3_bucket, tmp_path):
    store = on_store(spark, kafka_cfg, s3_bucket)
    local = kafka_cfg.with_data_root(tmp_path / "local")
    gen = GeneratorConfig(stream=STREAM, events=1200, files=2, seed=31)
    files = generate(gen)
    lines = [line for f in files for line in f]
    assert publish_files(store, gen, files) == len(lines)

    for cfg in (store, local):
        bronze = run_bronze(spark, cfg, STREAM)
        assert bronze.input_rows == len(lines)
        run_job(spark, cfg, get_job(JOB))
    assert run_bronze(spark, store, STREAM).input_rows == 0  # nothing new: no row twice

    # every offset once, in bronze or quarantine, counted on the store's tables
    acct = accounting(store, stream_schema(STREAM))
    assert acct.balanced and acct.records == len(lines), acct.partitions
    position = ["_source_partition", "_source_offset", "event_id"]
    in_store = _rows(spark, store.paths.table("bronze", STREAM), position)
    assert max(in_store.values()) == 1
    assert sum(in_store.values()) == sum(is_valid_transaction(line) for line in lines)
    assert in_store == _rows(spark, local.paths.table("bronze", STREAM), position)
    gold = _rows(spark, store.paths.table("gold", JOB))
    assert gold == _rows(spark, local.paths.table("gold", JOB)) and sum(gold.values()) > 0

    # where it all went: objects under the data root's key, nothing on this machine's disk
    # but its working state
    keys = {e.relative.split("/")[0] for e in locations.entries(store.data_root)}
    assert {"lake", "checkpoints"} <= keys
    for query in (query_name(STREAM), JOB):
        assert locations.is_file(store.paths.checkpoint(query) / "metadata")
    progress = ops_tables.read(store, "stream_progress", columns=["job", "num_input_rows"])
    assert sum(r["num_input_rows"] or 0 for r in progress if r["job"] == query_name(STREAM)) == (
        len(lines)
    )
    assert (
        not (store.work_root / "lake").exists() and not (store.work_root / "checkpoints").exists()
    )

    # a rebuild on the store removes the job's checkpoint, gold table and rows of progress,
    # and the job streams bronze again into the same gold
    removed = rebuild(store, JOB)
    assert removed["gold"] and removed["checkpoint"] and removed["progress_rows"] > 0
    assert not locations.exists(store.paths.table("gold", JOB))
    assert not locations.exists(store.paths.checkpoint(JOB))
    run_job(spark, store, get_job(JOB))
    assert _rows(spark, store.paths.table("gold", JOB)) == gold
