"""The first day an incremental reconciliation recomputes, from hand-written inputs."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from orchestration.recon.recon_scope import (
    NOTHING_NEW,
    NeedsFull,
    batch_ran_since,
    earliest_new_event,
    first_day,
    ingest_batch_floor,
    last_batch,
    last_reconciled,
    left_out,
    positions_now,
)
from streaming_jobs.storage.registry import registry

UTC = dt.timezone.utc


def commit(table, version: int, *actions: dict) -> None:
    log = table / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    (log / f"{version:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))


def add(low: str | None, rows: int = 3, data_change: bool = True) -> dict:
    stats = {"numRecords": rows, "minValues": {"event_time": low} if low else {}}
    return {"add": {"path": "x.parquet", "dataChange": data_change, "stats": json.dumps(stats)}}


def test_the_earliest_new_event_comes_from_the_files_added_since(tmp_path):
    table = tmp_path / "bronze"
    commit(table, 0, add("2026-03-01T00:00:00.000Z"))
    commit(table, 1, add("2026-03-02T10:00:00.000Z"), add("2026-03-02T08:30:00.000Z"))
    # OPTIMIZE rewrites old rows: not new events
    commit(table, 2, add("2026-02-01T00:00:00.000Z", data_change=False))
    commit(table, 3, add("2026-03-03T00:00:00.000Z"), add(None, rows=0))
    assert earliest_new_event(table, 0, 3, "event_time") == dt.datetime(
        2026, 3, 2, 8, 30, tzinfo=UTC
    )
    assert earliest_new_event(table, 3, 3, "event_time") is None


def test_a_missing_log_version_or_statistic_asks_for_a_full_run(tmp_path):
    table = tmp_path / "bronze"
    commit(table, 0, add("2026-03-01T00:00:00.000Z"))
    commit(table, 2, add("2026-03-01T00:00:00.000Z"))
    with pytest.raises(NeedsFull, match="version 1 is gone"):
        earliest_new_event(table, 0, 2, "event_time")
    commit(table, 1, add(None))
    with pytest.raises(NeedsFull, match="no statistics"):
        earliest_new_event(table, 0, 2, "event_time")


def batch_file(low: int, nulls: int = 0, data_change: bool = True) -> dict:
    stats = {
        "numRecords": 5,
        "minValues": {"_ingest_batch_id": low},
        "maxValues": {"_ingest_batch_id": low},
        "nullCount": {"_ingest_batch_id": nulls},
    }
    return {"add": {"path": "x.parquet", "dataChange": data_change, "stats": json.dumps(stats)}}


def test_a_table_holds_no_rows_until_a_file_with_rows_is_added(tmp_path):
    from streaming_jobs.core.delta_log import holds_no_rows

    table = tmp_path / "bronze"
    assert holds_no_rows(table)  # no table at all
    commit(table, 0, {"metaData": {"id": "t"}}, {"protocol": {"minReaderVersion": 1}})
    commit(table, 1, add(None, rows=0))  # an empty file: still no row
    assert holds_no_rows(table)
    commit(table, 2, {"add": {"path": "y.parquet", "dataChange": True}})  # no statistics
    assert not holds_no_rows(table)
    other = tmp_path / "other"
    commit(other, 0, add("2026-03-01T00:00:00.000Z", rows=2))
    assert not holds_no_rows(other)
    empty = tmp_path / "checkpointed"
    commit(empty, 3, {"commitInfo": {"operation": "SET TBLPROPERTIES"}})
    (empty / "_delta_log" / f"{2:020d}.checkpoint.parquet").write_bytes(b"")
    assert not holds_no_rows(empty)  # a checkpoint may hold files: never taken for empty


def test_the_replay_floor_is_the_least_ingestion_batch_added_after_a_version(tmp_path):
    table = tmp_path / "bronze"
    commit(table, 0, batch_file(0))
    commit(table, 1, batch_file(1))
    # OPTIMIZE moves batches 0 and 1 into one file: no row in it is new
    commit(table, 2, batch_file(0, data_change=False))
    commit(table, 3, batch_file(7))
    # a checkpoint reset: the ingestion's batch ids start again
    commit(table, 4, batch_file(2))
    assert ingest_batch_floor(table, 1) == 2
    assert ingest_batch_floor(table, 3) == 2
    assert ingest_batch_floor(table, 2) == 2
    commit(table, 5, batch_file(9))
    assert ingest_batch_floor(table, 4) == 9
    # nothing added since: one past the newest batch (rows that arrive meanwhile are newer)
    assert ingest_batch_floor(table, 5) == 10
    commit(table, 6, batch_file(0, data_change=False))
    assert ingest_batch_floor(table, 6) == 10
    # a file with rows that have no batch id: no floor, every row is read
    commit(table, 7, batch_file(10, nulls=1))
    assert ingest_batch_floor(table, 6) is None


def test_the_first_day_reaches_back_by_lookback_open_windows_and_sessions():
    jobs = registry()
    late = dt.datetime(2026, 3, 5, 0, 10, tzinfo=UTC)
    # a ride at 00:10 changes only its own day
    assert first_day(jobs["zone_revenue_hourly"], late, None, None) == "2026-03-05"
    # a payment at 00:10 may pay an order of the day before (within 20 minutes)
    assert first_day(jobs["order_payment_match"], late, None, None) == "2026-03-04"
    # windows still open last time are recomputed even without new events
    assert first_day(jobs["zone_revenue_hourly"], None, dt.date(2026, 3, 2), None) == "2026-03-02"
    assert first_day(jobs["zone_revenue_hourly"], late, dt.date(2026, 3, 2), None) == "2026-03-02"
    # a job with recon_chain: a session the click extends began two days earlier
    began = dt.datetime(2026, 3, 3, 23, 0, tzinfo=UTC)
    assert first_day(jobs["zone_revenue_hourly"], late, None, began) == "2026-03-03"
    # user_sessions' day is the day a session ends: a click changes that day and later ones
    # (the batch model composes the sessions it extends from their kept blocks)
    assert jobs["user_sessions"].recon_partition == "to_date(window_end)"
    assert not jobs["user_sessions"].recon_chain
    assert first_day(jobs["user_sessions"], late, None, None) == "2026-03-05"
    assert first_day(jobs["zone_revenue_hourly"], None, None, None) == NOTHING_NEW


def test_positions_are_the_newest_versions_read_and_the_newest_run_recorded():
    progress = [
        {
            "job": "j",
            "source_versions": [{"source_table": "orders", "version_from": 0, "version_to": 4}],
        },
        {
            "job": "j",
            "source_versions": [
                {"source_table": "orders", "version_from": 4, "version_to": 9},
                {"source_table": "payments", "version_from": 1, "version_to": 2},
            ],
        },
        {"job": "k", "source_versions": []},
    ]
    assert positions_now(progress) == {"j": {"orders": 9, "payments": 2}}
    t1, t2 = dt.datetime(2026, 3, 1, tzinfo=UTC), dt.datetime(2026, 3, 2, tzinfo=UTC)
    rows = [
        {
            "job": "j",
            "source": "orders",
            "version_to": 4,
            "query_id": "q",
            "fingerprint": "f",
            "open_from": None,
            "invocation_id": "a",
            "reconciled_at": t1,
        },
        {
            "job": "j",
            "source": "orders",
            "version_to": 9,
            "query_id": "q",
            "fingerprint": "f",
            "open_from": dt.date(2026, 2, 28),
            "invocation_id": "b",
            "reconciled_at": t2,
        },
        {
            "job": "j",
            "source": "payments",
            "version_to": 2,
            "query_id": "q",
            "fingerprint": "f",
            "open_from": dt.date(2026, 2, 28),
            "invocation_id": "b",
            "reconciled_at": t2,
        },
    ]
    assert last_reconciled(rows) == {
        "j": {
            "query_id": "q",
            "fingerprint": "f",
            "reconciled_at": t2,
            "open_from": dt.date(2026, 2, 28),
            "batch_id": None,
            "versions": {"orders": 9, "payments": 2},
        }
    }


def test_open_windows_count_only_if_the_stream_ran_a_batch_since():
    progress = [
        {"job": "j", "query_id": "old", "batch_id": 40},
        {"job": "j", "query_id": "q", "batch_id": 6},
        {"job": "j", "query_id": "q", "batch_id": 7},
        {"job": "k", "query_id": "q", "batch_id": 99},
    ]
    # the newest batch of the job's current query, not of an older one or of another job
    assert last_batch(progress, "j", "q") == 7
    assert last_batch(progress, "j", "never") is None
    assert not batch_ran_since({"batch_id": 7}, 7)
    assert batch_ran_since({"batch_id": 7}, 8)
    # restored to an earlier batch, or not recorded (positions from before the column): yes
    assert batch_ran_since({"batch_id": 7}, 5)
    assert batch_ran_since({"batch_id": None}, 7)
    assert batch_ran_since({}, 7)


def test_only_the_jobs_nothing_reached_are_left_out():
    variables = {"recon_from": {"b": NOTHING_NEW, "a": "2026-03-01", "c": None, "d": NOTHING_NEW}}
    assert left_out(variables) == ["int_b__batch", "recon_b", "int_d__batch", "recon_d"]
    assert left_out({"recon_from": {"a": None}}) == []
    assert left_out({"jobs": {}}) == []
    # a stream's staging view too, once nothing reached any of its jobs
    jobs = {"b": {"sources": {"s": "t"}}, "d": {"sources": {"s": "t", "u": "t"}}}
    assert left_out({**variables, "jobs": {**jobs, "a": {"sources": {"u": "t"}}}}) == [
        "int_b__batch",
        "recon_b",
        "int_d__batch",
        "recon_d",
        "stg_s",
    ]


def test_a_change_to_gold_made_outside_its_stream_is_found(tmp_path):
    """A DELETE by hand in gold is no new event: an incremental reconciliation found nothing
    new and left the job out, clean. Commits without a streaming writer's txn marker that
    change rows are found; the writer's own, and ones that change no row, are not."""
    import pyarrow as pa
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

    from streaming_jobs.core.delta_log import changed_outside_its_writer

    table = tmp_path / "gold"
    rows = pa.table({"k": [1, 2, 3]})
    marked = CommitProperties(app_transactions=[Transaction("query-1", 0)])
    write_deltalake(str(table), rows, commit_properties=marked)  # the stream's first batch
    before = dt.datetime.now(UTC)
    write_deltalake(
        str(table),
        pa.table({"k": [4]}),
        mode="append",
        commit_properties=(CommitProperties(app_transactions=[Transaction("query-1", 1)])),
    )  # its next batch
    DeltaTable(str(table)).optimize.compact()  # no row changes
    assert changed_outside_its_writer(table, before) is None
    DeltaTable(str(table)).delete("k = 2")  # by hand
    found = changed_outside_its_writer(table, before)
    assert found is not None and found.startswith("version 3, DELETE at ")
    # a change before the last reconciliation is history: that run saw it
    assert changed_outside_its_writer(table, dt.datetime.now(UTC) + dt.timedelta(seconds=1)) is None
