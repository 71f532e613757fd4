"""Folding old progress rows (`streaming_jobs.operations.lineage.plan`), from hand-written rows."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from streaming_jobs.operations.lineage import plan

T0 = datetime(2026, 3, 1, tzinfo=timezone.utc)


def batch(
    b: int,
    *,
    job="j",
    query="q1",
    minutes=None,
    watermark=None,
    dropped=0,
    rows=10,
    versions=None,
    rolled=None,
    **extra,
) -> dict:
    """Batch ``b`` of a lineage, recorded ``minutes`` after T0 (default b), reading bronze
    versions (b, b+1] of clicks."""
    low, high = versions or (b, b + 1)
    return {
        "job": job,
        "query_id": query,
        "batch_id": b,
        "run_id": "r",
        "ts": T0 + timedelta(minutes=b if minutes is None else minutes),
        "watermark": watermark or T0 + timedelta(minutes=b, seconds=30),
        "num_input_rows": rows,
        "num_output_rows": 1,
        "batch_duration_ms": 100,
        "rows_dropped_by_watermark": dropped,
        "rolled_up_batches": rolled,
        "source_versions": [{"source_table": "clicks", "version_from": low, "version_to": high}],
        "source_version_from": low,
        "source_version_to": high,
        "sink_version": 100 + b,
        "state_rows": 1000 + b,
        **extra,
    }


def test_the_old_batches_of_a_lineage_fold_into_one_row_that_keeps_sums_ranges_and_the_last():
    rows = [batch(b, dropped=b) for b in range(6)]  # batches 0-5 at minutes 0-5
    folds = plan(rows, cutoff=T0 + timedelta(minutes=3, seconds=1), savepoint_batches={})
    assert len(folds) == 1
    fold = folds[0]
    assert (fold.job, fold.query_id, fold.upto_batch, fold.reports) == ("j", "q1", 3, 4)
    assert [b["batch_id"] for b in fold.batches] == [0, 1, 2, 3]
    # each batch's late threshold is the watermark of the batch before it
    assert fold.thresholds == {
        0: None,
        1: T0 + timedelta(minutes=0, seconds=30),
        2: T0 + timedelta(minutes=1, seconds=30),
        3: T0 + timedelta(minutes=2, seconds=30),
    }
    row = fold.rollup()
    assert row["batch_id"] == 3 and row["rolled_up_batches"] == 4
    assert row["num_input_rows"] == 40 and row["rows_dropped_by_watermark"] == 0 + 1 + 2 + 3
    assert row["watermark"] == T0 + timedelta(minutes=3, seconds=30)  # the next batch's threshold
    assert row["sink_version"] == 103 and row["state_rows"] == 1003
    assert row["source_versions"] == [
        {"source_table": "clicks", "version_from": 0, "version_to": 4}
    ]
    assert (row["source_version_from"], row["source_version_to"]) == (0, 4)
    assert row["state_operators"] is None and row["progress_json"] is None
    assert fold.predicate == "job = 'j' and query_id = 'q1' and batch_id <= 3"


def test_a_figure_no_folded_batch_reported_stays_unknown_in_the_rollup():
    """A foreachBatch sink reports no output rows: the rollup says so, not 0."""
    rows = [batch(b, num_output_rows=None) for b in range(3)]
    rows[2]["num_input_rows"] = None  # a batch restored from the checkpoint has no reading
    row = plan(rows, cutoff=T0 + timedelta(minutes=2, seconds=1), savepoint_batches={})[0].rollup()
    assert row["num_output_rows"] is None
    assert row["num_input_rows"] == 20  # the readings there are, summed


def test_the_newest_batch_a_savepoints_batches_and_recent_ones_are_never_folded():
    rows = [batch(b) for b in range(6)]
    everything_old = T0 + timedelta(days=1)
    # the newest batch stays a row of its own
    assert plan(rows, everything_old, {})[0].upto_batch == 4
    # a restore to the oldest savepoint (batch 2) deletes the batches after it: they stay whole
    assert plan(rows, everything_old, {"j": 2})[0].upto_batch == 2
    assert plan(rows, everything_old, {"other": 0})[0].upto_batch == 4
    # nothing is old enough, or the oldest savepoint is before the first batch
    assert plan(rows, T0, {}) == []
    assert plan(rows, everything_old, {"j": -1}) == []
    # one batch only: it is the newest
    assert plan([batch(0)], everything_old, {}) == []
    # a batch recorded late (clock or replay) stops the run of old batches there
    shuffled = [batch(0), batch(1, minutes=500), batch(2), batch(3)]
    assert plan(shuffled, T0 + timedelta(minutes=10), {})[0].upto_batch == 0


def test_a_second_fold_extends_the_rollup_and_replayed_reports_are_replaced_with_it():
    rollup = batch(2, versions=(-1, 3), rows=30, dropped=4, rolled=3)
    replayed = batch(3, minutes=2.5, rows=7)  # batch 3 reported twice: the later report wins
    rows = [rollup, replayed, batch(3, rows=10, dropped=1), batch(4, dropped=2), batch(5)]
    fold = plan(rows, T0 + timedelta(minutes=4, seconds=1), {})[0]
    assert fold.previous is rollup and [b["batch_id"] for b in fold.batches] == [3, 4]
    assert fold.batches[0]["num_input_rows"] == 10
    # batch 3's threshold is the rollup's watermark (its last batch's)
    assert fold.thresholds == {3: rollup["watermark"], 4: T0 + timedelta(minutes=3, seconds=30)}
    assert fold.reports == 1 + 2 + 1  # the rollup, both reports of batch 3, batch 4
    row = fold.rollup()
    assert row["rolled_up_batches"] == 5 and row["num_input_rows"] == 30 + 10 + 10
    assert row["rows_dropped_by_watermark"] == 4 + 1 + 2
    assert row["source_versions"][0] == {
        "source_table": "clicks",
        "version_from": -1,
        "version_to": 5,
    }


def test_only_a_jobs_current_lineage_is_folded_and_each_job_on_its_own():
    old_lineage = [batch(b, query="q0", minutes=b) for b in range(3)]
    current = [batch(b, query="q1", minutes=100 + b) for b in range(3)]
    other = [batch(b, job="k", minutes=b) for b in range(2)]
    folds = plan(old_lineage + current + other, T0 + timedelta(days=1), {})
    assert [(f.job, f.query_id, f.upto_batch) for f in folds] == [("j", "q1", 1), ("k", "q1", 0)]


def test_an_ingestion_query_without_source_versions_folds_its_counts():
    rows = [
        {
            **batch(b),
            "job": "bronze_clicks",
            "source_versions": None,
            "source_version_from": None,
            "source_version_to": None,
        }
        for b in range(3)
    ]
    row = plan(rows, T0 + timedelta(days=1), {})[0].rollup()
    assert row["source_versions"] is None and row["num_input_rows"] == 20
    assert row["rolled_up_batches"] == 2
