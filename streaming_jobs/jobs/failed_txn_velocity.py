"""failed_txn_velocity: FAILED transactions per user over a sliding event-time window.

Computes, for each user and each window of ``window`` length starting every ``slide``, the number
of distinct FAILED transactions whose ``event_time`` falls in ``[window_start, window_end)``.
Exact duplicates (same ``event_id``) are counted once.

State is bounded by the watermark: deduplication state for an event is dropped once the
watermark passes its event time, and a window's count is emitted (append mode) and removed from
state once the watermark passes the window's end. Events that arrive behind the watermark are
dropped and counted by the deduplication operator's ``numRowsDroppedByWatermark``; they are
dropped there, before the window aggregation, so that metric counts events, one per dropped
line.

This version uses Spark's built-in sliding ``window()``, which copies each event into
``window / slide`` windows: fine for small ratios.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from streaming_jobs.jobs.dedup import dedup_within_watermark
from streaming_jobs.jobs.spec import JobSpec, StateBound, StateThresholds


def build(events: DataFrame, *, window: str, slide: str, watermark: str) -> DataFrame:
    """Bronze transactions in, one row per (user, window) with its count of FAILED events."""
    failed = dedup_within_watermark(events, "event_time", watermark).where(
        F.col("status") == "FAILED")
    return (
        failed.groupBy("user_id", F.window("event_time", window, slide).alias("w"))
        .agg(F.count(F.lit(1)).alias("failed_count"))
        .select(
            "user_id",
            F.col("w.start").alias("window_start"),
            F.col("w.end").alias("window_end"),
            "failed_count",
        )
    )


SPEC = JobSpec(
    name="failed_txn_velocity",
    description="FAILED transactions per user over a sliding event-time window",
    source="transactions",
    keys=("user_id", "window_start", "window_end"),
    measures=("failed_count",),
    event_time="event_time",
    state=StateBound(watermark="10 minutes"),
    output_mode="append",
    build=build,
    params={"window": "1 hour", "slide": "15 minutes"},
    thresholds=StateThresholds(warn_rows=200_000, critical_rows=1_000_000),
)
