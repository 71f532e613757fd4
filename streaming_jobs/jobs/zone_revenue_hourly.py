"""zone_revenue_hourly: trips, revenue and average fare per pickup zone per hour.

Tumbling one-hour event-time windows on ``pickup_time``. Exact duplicates (same ``event_id``)
count once. State is bounded by the watermark: deduplication state for a ride and a window's
partial aggregate are dropped once the watermark passes them, and each window is emitted once,
final (append mode), when the watermark passes its end. Rides behind the watermark are dropped
by the deduplication operator and counted in its ``numRowsDroppedByWatermark``.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from streaming_jobs.schemas import RIDES
from streaming_jobs.stateful.dedup import dedup_stream
from streaming_jobs.spec import JobSpec, StateBound, StateThresholds


def build(rides: DataFrame, *, window: str, watermark: str) -> DataFrame:
    deduped = dedup_stream(rides, RIDES, watermark)
    return (
        deduped.groupBy("pickup_zone", F.window("pickup_time", window).alias("w"))
        .agg(
            F.count(F.lit(1)).alias("trips"),
            F.sum("total_amount").alias("revenue"),
            F.avg("fare").alias("avg_fare"),
        )
        .select(
            "pickup_zone",
            F.col("w.start").alias("window_start"),
            F.col("w.end").alias("window_end"),
            "trips",
            "revenue",
            "avg_fare",
        )
    )


SPEC = JobSpec(
    name="zone_revenue_hourly",
    description="Trips, revenue and average fare per pickup zone per hour (tumbling windows)",
    source="rides",
    keys=("pickup_zone", "window_start", "window_end"),
    measures=("trips", "revenue", "avg_fare"),
    event_time="pickup_time",
    state=StateBound(watermark="10 minutes"),
    output_mode="append",
    build=build,
    params={"window": "1 hour"},
    recon_partition="to_date(window_start)",
    thresholds=StateThresholds(warn_rows=100_000, critical_rows=500_000),
    tolerance=1e-6,  # sums of doubles in another order
    recon_warn_share=0.75,  # the latest hour of every zone is open until the watermark passes
)
