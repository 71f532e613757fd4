"""Delta tables of the lake: creation with the properties tidemark relies on, idempotent writes.

Tables are addressed by path (the streaming JVM keeps no metastore). Bronze tables carry row
tracking so that each row's commit version (``_metadata.row_commit_version``) can be matched with
the stream batches that read it: that is how reconciliation knows which events a job dropped
as late.
"""

from __future__ import annotations

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


def read_table(spark: SparkSession, path: Path) -> DataFrame:
    return spark.read.format("delta").load(str(path))


def table_version(spark: SparkSession, path: Path) -> int:
    from delta.tables import DeltaTable

    return DeltaTable.forPath(spark, str(path)).history(1).collect()[0]["version"]


def rows_written_since(spark: SparkSession, path: Path, version: int) -> int:
    """Rows written by the commits after ``version`` (the Delta sink reports no row count)."""
    from delta.tables import DeltaTable

    history = DeltaTable.forPath(spark, str(path)).history().where(f"version > {version}")
    return sum(int((r["operationMetrics"] or {}).get("numOutputRows", 0))
               for r in history.select("operationMetrics").collect())
