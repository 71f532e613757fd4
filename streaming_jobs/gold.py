"""The gold side of a job: bronze as a stream in, the job's ``build``, a Delta table out."""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.streaming import DataStreamWriter

from streaming_jobs.config import TidemarkConfig
from streaming_jobs.jobs.spec import JobSpec
from streaming_jobs.lake import ensure_table, table_exists

# Read every new bronze version whole in one batch (Delta's default cuts at 1000 files): the
# recorded version range of each batch then says exactly which bronze rows it read.
UNLIMITED_FILES = 1_000_000_000


def gold_writer(spark: SparkSession, cfg: TidemarkConfig, spec: JobSpec) -> DataStreamWriter:
    paths = cfg.paths
    bronze = paths.table("bronze", spec.source)
    if not table_exists(spark, bronze):
        raise FileNotFoundError(
            f"job {spec.name}: its source table {bronze} does not exist yet; materialize "
            f"bronze/{spec.source} first (it creates the table on its first run)"
        )
    events = (
        spark.readStream.format("delta")
        .option("maxFilesPerTrigger", UNLIMITED_FILES)
        .load(str(bronze))
    )
    result = spec.apply(events)
    target = paths.table("gold", spec.name)
    ensure_table(spark, target, result.schema)
    if spec.output_mode != "append":
        raise NotImplementedError(f"job {spec.name}: update mode arrives with the MERGE sink")
    return (
        result.writeStream.queryName(spec.name)
        .format("delta")
        .outputMode("append")
        .option("checkpointLocation", str(paths.checkpoint(spec.name)))
        .option("path", str(target))
    )
