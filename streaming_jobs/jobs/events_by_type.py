"""events_by_type: the lake ETL case, clicks routed by type into a partitioned Delta table.

Every distinct click lands once in ``gold/events_by_type``, partitioned by ``event_type`` (the
click's action: view, click, add_to_cart, purchase) and ``event_date`` (UTC), with its fields
and ingestion lineage. Readers prune to one type and day.

Files stay few and well sized. Each micro-batch is shuffled by the partition columns first, so
it writes one file per partition it touches instead of one per task per partition; and the
table has Delta's auto compaction on (``delta.autoOptimize.autoCompact``), which bin-packs a
partition's small files once it holds ``spark.databricks.delta.autoCompact.minNumFiles`` of
them (10, set in the SparkSession factory). Compaction commits change no data, so readers of
the table as a stream skip them.

State is bounded by the watermark (10 minutes): only deduplication keeps state, each event id
until the watermark passes its time. Clicks behind the watermark are dropped and counted by it.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from streaming_jobs.schemas import CLICKS
from streaming_jobs.stateful.dedup import dedup_stream
from streaming_jobs.spec import JobSpec, StateBound, StateThresholds


def build(clicks: DataFrame, *, watermark: str) -> DataFrame:
    deduped = dedup_stream(clicks, CLICKS, watermark)
    routed = deduped.select(
        F.col("action").alias("event_type"),
        F.to_date("event_time").alias("event_date"),
        "event_id",
        "event_time",
        "user_id",
        "page",
        "amount",
        F.col("_ingested_at").alias("ingested_at"),
    )
    return routed.repartition("event_type", "event_date")


SPEC = JobSpec(
    name="events_by_type",
    description="Distinct clicks routed by type into Delta partitioned by (event_type, "
    "event_date), with few well-sized files per partition",
    source="clicks",
    keys=("event_type", "event_date", "event_id"),
    measures=("amount",),
    event_time="event_time",
    state=StateBound(watermark="10 minutes"),
    output_mode="append",
    build=build,
    partition_by=("event_type", "event_date"),
    recon_partition="event_date",
    table_properties={"delta.autoOptimize.autoCompact": "true"},
    thresholds=StateThresholds(warn_rows=500_000, critical_rows=2_000_000),
    tolerance=1e-6,
)
