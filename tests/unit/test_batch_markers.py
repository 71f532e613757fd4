"""tidemark's own exactly-once marker, read from hand-written Delta logs (no Spark)."""

from __future__ import annotations

import datetime as dt
import json

from streaming_jobs.core.delta_log import (
    CLOCK_MARGIN_MS,
    batch_written,
    changed_outside_its_writer,
    marker_metadata,
    txn_of,
    version_of_batch,
)

T0 = 1_800_000_000_000  # a commit time, in ms


def commit(table, version: int, timestamp: int, *, marker=None, txn=None) -> None:
    """Commit ``version``: a commitInfo (with ``marker`` = (app, batch) in its userMetadata),
    Delta's ``txn`` action for ``txn`` = (app, batch), and one added file."""
    info = {"timestamp": timestamp, "operation": "WRITE"}
    if marker:
        info["userMetadata"] = marker_metadata(*marker)
    actions = [{"commitInfo": info}]
    if txn:
        actions.append({"txn": {"appId": txn[0], "version": txn[1]}})
    actions.append({"add": {"path": f"part-{version}.parquet", "dataChange": True}})
    log = table / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    (log / f"{version:020d}.json").write_text("\n".join(json.dumps(a) for a in actions))


def test_the_newest_commit_of_the_writer_decides(tmp_path):
    commit(tmp_path, 0, T0)  # the table's creation
    commit(tmp_path, 1, T0 + 1000, marker=("q1", 0))
    commit(tmp_path, 2, T0 + 2000, marker=("q1", 1))
    commit(tmp_path, 3, T0 + 3000)  # someone else: a compaction
    assert batch_written(tmp_path, "q1", 1, T0 + 1500)  # a replay of batch 1
    assert batch_written(tmp_path, "q1", 0, T0 + 500)
    assert not batch_written(tmp_path, "q1", 2, T0 + 2500)  # the next batch
    assert not batch_written(tmp_path, "q2", 1, T0 + 1500)  # another query (a restored one)
    # the readers of the log see the marker as they see Delta's txn
    assert txn_of(tmp_path, 2, "q1") == 1 and txn_of(tmp_path, 3, "q1") is None
    assert version_of_batch(tmp_path, "q1", 1) == 2 and version_of_batch(tmp_path, "q1", 5) == 2


def test_commits_by_the_delta_sink_count_too(tmp_path):
    """A table written by the Delta sink before (Delta's txn action, the same app id)."""
    commit(tmp_path, 0, T0, txn=("q1", 7))
    commit(tmp_path, 1, T0 + 1000, marker=("q1", 8))
    assert batch_written(tmp_path, "q1", 8, T0) and not batch_written(tmp_path, "q1", 9, T0)
    assert batch_written(tmp_path, "q1", 7, None)
    assert txn_of(tmp_path, 0, "q1") == 7


def test_the_search_stops_at_commits_older_than_the_batch(tmp_path):
    """Batch 3's commit cannot be older than its trigger, less the clock's margin: the search
    stops at the first such commit instead of reading the whole log. A marker it finds is
    believed whatever the commit's time (a clock stepped back further than the margin)."""
    commit(tmp_path, 0, T0, marker=("q1", 3))  # beyond the stop: not read
    commit(tmp_path, 1, T0 + 1000)  # another writer, older than the batch: the search stops
    commit(tmp_path, 2, T0 + CLOCK_MARGIN_MS + 60_000)  # another writer, newer
    since = T0 + CLOCK_MARGIN_MS + 30_000
    assert not batch_written(tmp_path, "q1", 3, since)
    # without a trigger time the whole log is read
    assert batch_written(tmp_path, "q1", 3, None)
    # a commit within the margin (a clock stepped back) is still read
    assert batch_written(tmp_path, "q1", 3, T0 + 1000 + CLOCK_MARGIN_MS)


def test_metadata_that_is_not_a_marker_is_ignored(tmp_path):
    commit(tmp_path, 0, T0)
    log = tmp_path / "_delta_log" / f"{1:020d}.json"
    for metadata in ("tidemark_txn", '{"tidemark_txn": "x"}', '{"other": 1}', "[1]"):
        info = {"commitInfo": {"timestamp": T0, "userMetadata": metadata}}
        log.write_text(json.dumps(info))
        assert txn_of(tmp_path, 1, "q1") is None
        assert not batch_written(tmp_path, "q1", 0, T0)
    assert not batch_written(tmp_path / "missing", "q1", 0, T0)  # no table yet


def test_the_writers_own_commits_are_no_change_outside_it(tmp_path):
    """Reconciliation's incremental scope asks whether gold changed outside its stream since
    the last run: the stream's own commits (either marker) are not such a change, a write by
    anyone else is."""
    commit(tmp_path, 0, T0)  # the table's creation, before the last reconciliation
    commit(tmp_path, 1, T0 + 2000, marker=("q1", 0))
    commit(tmp_path, 2, T0 + 3000, txn=("q1", 1))  # the Delta sink's, before an upgrade
    commit(tmp_path, 3, T0 + 4000, marker=("q1", 2))
    since = dt.datetime.fromtimestamp((T0 + 1000) / 1000, dt.timezone.utc)
    assert changed_outside_its_writer(tmp_path, since) is None
    commit(tmp_path, 4, T0 + 5000)  # a write by hand
    assert changed_outside_its_writer(tmp_path, since).startswith("version 4, WRITE at ")
