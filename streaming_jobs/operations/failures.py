"""Queries that ended with an error, recorded in ``ops/stream_failures`` for the health sensor."""

from __future__ import annotations

from datetime import datetime, timezone

from pyspark.sql import SparkSession
from pyspark.sql import types as T

from streaming_jobs.config import TidemarkConfig

FAILURE_SCHEMA = T.StructType([
    T.StructField("job", T.StringType()),
    T.StructField("run_id", T.StringType()),
    T.StructField("failed_at", T.TimestampType()),
    T.StructField("error", T.StringType()),
])


def record_failure(spark: SparkSession, cfg: TidemarkConfig, job: str, run_id: str,
                   error: str) -> None:
    row = (job, run_id, datetime.now(timezone.utc), error[:4000])
    (spark.createDataFrame([row], FAILURE_SCHEMA).write.format("delta").mode("append")
     .save(str(cfg.paths.table("ops", "stream_failures"))))
