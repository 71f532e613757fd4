"""user_sessions: sessions of clicks per user, split by an inactivity gap.

A session is a run of a user's clicks in which each click comes at most ``gap`` after the
previous one (Spark's ``session_window`` merges sessions that touch, so exactly one gap later
still continues the session); it spans [first click, last click + gap). Per session:
clicks, duration (last click - first click, seconds) and spend (sum of amount). Exact duplicates
count once.

State is bounded by the watermark: a session is emitted once, final (append mode), and removed
from state when the watermark passes its end; deduplication state goes the same way. Clicks
behind the watermark are dropped by the deduplication operator and counted there.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from streaming_jobs.schemas import CLICKS
from streaming_jobs.stateful.dedup import dedup_stream
from streaming_jobs.spec import JobSpec, StateBound, StateThresholds


def build(clicks: DataFrame, *, gap: str, watermark: str) -> DataFrame:
    deduped = dedup_stream(clicks, CLICKS, watermark)
    return (
        deduped.groupBy("user_id", F.session_window("event_time", gap).alias("s"))
        .agg(
            F.count(F.lit(1)).alias("clicks"),
            (F.max("event_time").cast("double") - F.min("event_time").cast("double")).alias(
                "duration_seconds"
            ),
            F.sum("amount").alias("spend"),
        )
        .select(
            "user_id",
            F.col("s.start").alias("window_start"),
            F.col("s.end").alias("window_end"),
            "clicks",
            "duration_seconds",
            "spend",
        )
    )


SPEC = JobSpec(
    name="user_sessions",
    description="Sessions of clicks per user (inactivity gap): clicks, duration, spend",
    source="clicks",
    keys=("user_id", "window_start", "window_end"),
    measures=("clicks", "duration_seconds", "spend"),
    event_time="event_time",
    state=StateBound(watermark="10 minutes"),
    output_mode="append",
    build=build,
    params={"gap": "5 minutes"},
    # the day a session ends: a new click changes only sessions that end at or after it, and
    # the batch model composes them from the blocks it kept and the new clicks (no read-back)
    recon_partition="to_date(window_end)",
    recon_composed=True,
    thresholds=StateThresholds(warn_rows=100_000, critical_rows=500_000),
    tolerance=1e-6,
)
