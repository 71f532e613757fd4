"""failed_txn_velocity against expectations built by hand and in plain Python."""

from __future__ import annotations

from datetime import datetime

from pyspark.testing import assertDataFrameEqual

import scenarios
from streaming_jobs.jobs import get_job
from streaming_jobs.lake import read_table


def test_build_counts_distinct_failed_events_per_sliding_window(spark):
    spec = get_job("failed_txn_velocity")
    events = spark.createDataFrame(
        [("a", "u1", "FAILED", datetime(2026, 1, 1, 0, 10)),
         ("a", "u1", "FAILED", datetime(2026, 1, 1, 0, 10)),  # exact duplicate
         ("b", "u1", "FAILED", datetime(2026, 1, 1, 0, 50)),
         ("c", "u1", "APPROVED", datetime(2026, 1, 1, 0, 20)),
         ("d", "u2", "FAILED", datetime(2026, 1, 1, 1, 0))],
        "event_id string, user_id string, status string, event_time timestamp")
    result = spec.apply(events)
    t = lambda h, m: datetime(2026, 1, 1, h, m) if h >= 0 else datetime(2025, 12, 31, 24 + h, m)
    expected = spark.createDataFrame([
        # u1 at 00:10 is in windows starting 23:15, 23:30, 23:45, 00:00; at 00:50 in 00:00..00:45
        ("u1", t(-1, 15), t(0, 15), 1), ("u1", t(-1, 30), t(0, 30), 1),
        ("u1", t(-1, 45), t(0, 45), 1), ("u1", t(0, 0), t(1, 0), 2),
        ("u1", t(0, 15), t(1, 15), 1), ("u1", t(0, 30), t(1, 30), 1), ("u1", t(0, 45), t(1, 45), 1),
        ("u2", t(0, 15), t(1, 15), 1), ("u2", t(0, 30), t(1, 30), 1),
        ("u2", t(0, 45), t(1, 45), 1), ("u2", t(1, 0), t(2, 0), 1),
    ], "user_id string, window_start timestamp, window_end timestamp, failed_count long")
    assertDataFrameEqual(result, expected)


def test_stream_emits_closed_windows_and_drops_late_events(spark, cfg):
    spec = get_job("failed_txn_velocity")
    late_total, metrics = scenarios.run_waves(spark, cfg)
    gold = read_table(spark, cfg.paths.table("gold", spec.name))
    got = {(r.user_id, r.window_start, r.window_end): r.failed_count for r in gold.collect()}
    assert got == scenarios.expected_stream_rows()
    assert late_total == len(scenarios.LATE)
    assert metrics.watermark == datetime(2026, 1, 1, 3, 10)  # 200 min - 10 min delay
    assert metrics.checkpoint_batch_id is not None and metrics.output_rows > 0


def test_state_is_bounded_by_the_watermark(spark, cfg):
    spec = get_job("failed_txn_velocity")
    _, metrics = scenarios.run_waves(spark, cfg)
    progress = read_table(spark, cfg.paths.table("ops", "stream_progress")) \
        .where(f"job = '{spec.name}'").orderBy("batch_id").collect()
    peak = max(r.state_rows for r in progress)
    # after the last no-data batch only windows still open (ending after 03:10) remain
    assert metrics.state_rows < peak
    open_windows = sum(1 for (u, s), _ in scenarios.window_counts(
        [e for e in scenarios.WAVE_1 + scenarios.WAVE_2 if e["event_id"] not in scenarios.LATE]).items()
        if s + scenarios.WINDOW > scenarios.FINAL_WATERMARK_MIN)
    agg_rows = [op.rows for op in progress[-1].state_operators if op.operator == "stateStoreSave"]
    assert agg_rows == [open_windows]
