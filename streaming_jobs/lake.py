"""Delta tables of the lake: creation with the properties tidemark relies on, idempotent writes.

Tables are addressed by path (the streaming JVM keeps no metastore). Bronze tables carry row
tracking so that each row's commit version (``_metadata.row_commit_version``) can be matched with
the stream batches that read it: that is how reconciliation knows which events a job dropped
as late.
"""

from __future__ import annotations

import threading
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

ROW_TRACKING = {"delta.enableRowTracking": "true"}


def table_exists(spark: SparkSession, path: Path) -> bool:
    from delta.tables import DeltaTable

    return (path / "_delta_log").is_dir() and DeltaTable.isDeltaTable(spark, str(path))


def ensure_table(spark: SparkSession, path: Path, schema: T.StructType,
                 properties: dict[str, str] | None = None,
                 partition_by: list[str] | None = None) -> None:
    """Create an empty Delta table at ``path`` unless one is there."""
    from delta.tables import DeltaTable

    builder = DeltaTable.createIfNotExists(spark).location(str(path)).addColumns(schema)
    for key, value in (properties or {}).items():
        builder = builder.property(key, value)
    if partition_by:
        builder = builder.partitionedBy(*partition_by)
    builder.execute()


def append_once(df: DataFrame, path: Path, app_id: str, version: int) -> None:
    """Append ``df`` unless this (app_id, version) was committed before: replays are no-ops.

    Used inside foreachBatch with the batch id as version, which makes a re-run batch after a
    crash write nothing twice (Delta's idempotent writes, ``txnAppId``/``txnVersion``).
    """
    (df.write.format("delta").mode("append")
       .option("txnAppId", app_id).option("txnVersion", version)
       .save(str(path)))


# Delta takes the idempotency key of a MERGE from session settings; one MERGE at a time per
# session keeps two queries in one SparkSession from seeing each other's key.
_MERGE_LOCK = threading.Lock()


def merge_once(df: DataFrame, path: Path, keys: tuple[str, ...], app_id: str, version: int) -> None:
    """Upsert ``df`` into the table on ``keys`` unless (app_id, version) was committed before.

    A micro-batch replayed after a crash then changes nothing twice, whatever the update does.
    """
    from delta.tables import DeltaTable

    spark = df.sparkSession
    condition = " and ".join(f"t.`{k}` <=> s.`{k}`" for k in keys)
    with _MERGE_LOCK:
        spark.conf.set("spark.databricks.delta.write.txnAppId", app_id)
        spark.conf.set("spark.databricks.delta.write.txnVersion", str(version))
        try:
            (DeltaTable.forPath(spark, str(path)).alias("t")
             .merge(df.alias("s"), condition)
             .whenMatchedUpdateAll()
             .whenNotMatchedInsertAll()
             .execute())
        finally:
            spark.conf.unset("spark.databricks.delta.write.txnAppId")
            spark.conf.unset("spark.databricks.delta.write.txnVersion")


def read_table(spark: SparkSession, path: Path) -> DataFrame:
    return spark.read.format("delta").load(str(path))


def table_version(spark: SparkSession, path: Path) -> int:
    from delta.tables import DeltaTable

    return DeltaTable.forPath(spark, str(path)).history(1).collect()[0]["version"]


def rows_written_since(spark: SparkSession, path: Path, version: int) -> int:
    """Rows appended or upserted by the commits after ``version`` (from the Delta log: the
    Delta sink and foreachBatch report no row count)."""
    from delta.tables import DeltaTable

    history = DeltaTable.forPath(spark, str(path)).history().where(f"version > {version}")
    total = 0
    for row in history.select("operation", "operationMetrics").collect():
        metrics = row["operationMetrics"] or {}
        if row["operation"] == "MERGE":
            total += int(metrics.get("numTargetRowsInserted", 0))
            total += int(metrics.get("numTargetRowsUpdated", 0))
        else:
            total += int(metrics.get("numOutputRows", 0))
    return total
