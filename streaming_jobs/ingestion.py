"""Bronze ingestion: landing JSON lines -> Delta ``bronze/<stream>`` and ``quarantine/<stream>``.

Every landing line ends in exactly one table: a valid line in bronze (typed fields plus
``_source_file``, ``_ingested_at`` and ``_ingest_batch_id``), a malformed one in quarantine
(``raw_line``, its exact bytes ``raw_bytes`` and ``reason``). A valid line that fails one of the
stream's ``quarantine`` expectations goes to quarantine too, with the rule as its reason; a
``fail`` expectation stops the batch before anything is written (`streaming_jobs.expectations`).
Both writes of a micro-batch are idempotent Delta writes keyed by the batch id, so a batch
replayed after a crash adds nothing twice: exactly-once across restarts.

Bronze keeps duplicates and late events as they arrived; the jobs decide what they mean.
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.streaming import DataStreamWriter

from streaming_jobs.checkpoints import query_id
from streaming_jobs.config import TidemarkConfig
from streaming_jobs.expectations import record, resolve, result_rows, split
from streaming_jobs.lake import ROW_TRACKING, add_missing_columns, append_once, ensure_table
from streaming_jobs.schemas import StreamSchema
from streaming_jobs.validation import parse_lines

LINEAGE = [
    T.StructField("_source_file", T.StringType()),
    T.StructField("_ingested_at", T.TimestampType()),
    T.StructField("_ingest_batch_id", T.LongType()),
]
QUARANTINE_SCHEMA = T.StructType([
    T.StructField("raw_line", T.StringType()),  # the line as text (bytes not UTF-8 show as U+FFFD)
    T.StructField("reason", T.StringType()),
    *LINEAGE,
    T.StructField("raw_bytes", T.BinaryType()),  # the line's exact bytes, as landed
])


BRONZE_QUERY_PREFIX = "bronze_"


def query_name(stream: str) -> str:
    """The name (and checkpoint folder) of ``stream``'s ingestion query: ``bronze_<stream>``."""
    return f"{BRONZE_QUERY_PREFIX}{stream}"


def stream_of(query: str) -> str | None:
    """The stream an ingestion query ingests; None for a job's query."""
    return query.removeprefix(BRONZE_QUERY_PREFIX) if query.startswith(BRONZE_QUERY_PREFIX) \
        else None


def landing_files(folder: Path) -> list[Path]:
    """The files of a landing folder that bronze ingestion reads: every regular file whose name
    does not start with ``.`` or ``_`` (Spark's file source skips those: write a file under
    such a name, then rename it), whatever its extension."""
    if not folder.is_dir():
        return []
    return sorted(f for f in folder.iterdir()
                  if f.is_file() and not f.name.startswith((".", "_")))


def bronze_schema(schema: StreamSchema) -> T.StructType:
    return T.StructType([*schema.struct.fields, *LINEAGE])


class BronzeBatchWriter:
    """The foreachBatch function; remembers how many rows each batch wrote where."""

    def __init__(self, spark: SparkSession, cfg: TidemarkConfig, schema: StreamSchema) -> None:
        self.cfg, self.schema = cfg, schema
        paths = cfg.paths
        self.bronze = paths.table("bronze", schema.name)
        self.quarantine = paths.table("quarantine", schema.name)
        self.checkpoint = paths.checkpoint(query_name(schema.name))
        self.written: dict[int, tuple[int, int]] = {}
        ensure_table(spark, self.bronze, bronze_schema(schema), ROW_TRACKING)
        ensure_table(spark, self.quarantine, QUARANTINE_SCHEMA)
        add_missing_columns(spark, self.quarantine, QUARANTINE_SCHEMA)  # older data roots
        resolve(spark.createDataFrame([], schema.struct), f"stream {schema.name}",
                schema.expectations)

    def __call__(self, lines: DataFrame, batch_id: int) -> None:
        parsed = (
            parse_lines(lines, self.schema)
            .withColumn("_ingested_at", F.current_timestamp())
            .withColumn("_ingest_batch_id", F.lit(batch_id).cast("long"))
            .persist()
        )
        try:
            columns = [*self.schema.field_names, *[f.name for f in LINEAGE]]
            valid = parsed.where(F.col("_reason").isNull())
            # the stream's expectations, on the valid rows (raises before any write on 'fail')
            good, failed, found = split(valid, f"stream {self.schema.name} (batch {batch_id})",
                                        self.schema.expectations)
            bad = parsed.where(F.col("_reason").isNotNull())
            if failed is not None:
                bad = bad.unionByName(failed)
            bad = bad.select(F.col("value").alias("raw_line"), F.col("_reason").alias("reason"),
                             *[f.name for f in LINEAGE],
                             F.col("value").cast("binary").alias("raw_bytes"))
            # keyed by the checkpoint's identity: a rebuilt checkpoint's batch 0 is new data
            identity = query_id(self.checkpoint)
            app_id = f"tidemark.bronze.{identity}"
            record(self.cfg, result_rows(query_name(self.schema.name), identity, batch_id,
                                         self.schema.expectations, found))
            append_once(good.select(*columns), self.bronze, app_id, batch_id)
            append_once(bad, self.quarantine, app_id, batch_id)
            self.written[batch_id] = (good.count(), bad.count())
        finally:
            parsed.unpersist()


def bronze_writer(spark: SparkSession, cfg: TidemarkConfig, schema: StreamSchema,
                  max_files_per_trigger: int | None = None) -> tuple[DataStreamWriter, BronzeBatchWriter]:
    landing = cfg.paths.landing_dir(schema.name)
    landing.mkdir(parents=True, exist_ok=True)
    reader = spark.readStream.format("text")
    if max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", max_files_per_trigger)
    lines = (
        reader.load(str(landing))
        .select("value", F.col("_metadata.file_path").alias("_source_file"))
    )
    sink = BronzeBatchWriter(spark, cfg, schema)
    writer = (
        lines.writeStream.queryName(query_name(schema.name))
        .option("checkpointLocation", str(cfg.paths.checkpoint(query_name(schema.name))))
        .foreachBatch(sink)
    )
    return writer, sink
