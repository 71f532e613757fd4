"""Bronze ingestion: a stream's source -> Delta ``bronze/<stream>`` and ``quarantine/<stream>``.

The source is the landing folder's JSON lines or a Kafka topic's record values
(`streaming_jobs.storage.kafka`): one contract for both. Every line (record) ends in exactly one table:
a valid one in bronze (typed fields plus ``_source_file``, ``_ingested_at``,
``_ingest_batch_id`` and, from Kafka, ``_source_partition`` and ``_source_offset``), a malformed
one in quarantine (``raw_line``, its exact bytes ``raw_bytes`` and ``reason``). A valid line that fails one of the
stream's ``quarantine`` expectations goes to quarantine too, with the rule as its reason; a
``fail`` expectation stops the batch before anything is written (`streaming_jobs.storage.expectations`).
Both writes of a micro-batch are idempotent Delta writes keyed by the batch id, so a batch
replayed after a crash adds nothing twice: exactly-once across restarts.

Bronze keeps duplicates and late events as they arrived; the jobs decide what they mean.
"""

from __future__ import annotations

import logging

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.streaming import DataStreamWriter

from streaming_jobs.core.checkpoints import bronze_app_id, query_id, query_name, still_owned
from streaming_jobs.core import locations
from streaming_jobs.core.landed_bytes import COMPRESSED, LONGEST_LINE, extension, measured
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.core.locations import Item, Location, Where
from streaming_jobs.storage.expectations import record, resolve, result_rows, split
from streaming_jobs.core.interrupts import stoppable
from streaming_jobs.storage.lake import (
    ROW_TRACKING,
    add_missing_columns,
    append_once,
    ensure_table,
    spark_path,
)
from streaming_jobs.schemas import StreamSchema
from streaming_jobs.storage.spark import without_adaptive_plans
from streaming_jobs.core.validation import LINE, line_parser

LINEAGE = [
    T.StructField("_source_file", T.StringType()),
    T.StructField("_ingested_at", T.TimestampType()),
    T.StructField("_ingest_batch_id", T.LongType()),
]
# Where a Kafka record was: null for landing lines (their file is _source_file). Last in both
# tables: older data roots get them appended (`add_missing_columns`).
POSITION = [
    T.StructField("_source_partition", T.IntegerType()),
    T.StructField("_source_offset", T.LongType()),
]
# What the landing file was when Spark read it (its size and modification time, from the
# reader's own metadata): the accounting compares them with the file now, so a file replaced
# under its name is named whatever its line count. Null from Kafka; last, as POSITION.
IDENTITY = [
    T.StructField("_source_size", T.LongType()),
    T.StructField("_source_modified", T.TimestampType()),
]
QUARANTINE_SCHEMA = T.StructType(
    [
        T.StructField(
            "raw_line", T.StringType()
        ),  # the line as text (bytes not UTF-8 show as U+FFFD)
        T.StructField("reason", T.StringType()),
        *LINEAGE,
        T.StructField("raw_bytes", T.BinaryType()),  # the line's exact bytes, as landed
        *POSITION,
        *IDENTITY,
    ]
)

LOG = logging.getLogger(__name__)

# Where ingestion moves what it must not read (Spark's file source skips names starting with _)
REFUSED_DIR = "_refused"
# Characters Spark's file source takes for a pattern when it reads a batch's files: a name
# holding one made it read the folder's other files twice
PATTERN_CHARS = frozenset("?*[]{}\\")


def landing_refusal(entry: Item) -> str | None:
    """Why ingestion must not read this landing entry, or None."""
    if entry.kind == "link":
        return (
            "a symbolic link: ingestion reads only files inside the landing folder, never "
            "what a link points to; copy the file in instead"
        )
    try:
        entry.name.encode("utf-8")
    except UnicodeEncodeError:
        return (
            "its name is not valid UTF-8, which Spark's file source cannot list; land it "
            "again under a UTF-8 name"
        )
    chars = sorted(PATTERN_CHARS & set(entry.name))
    if chars:
        return (
            f"its name holds {' '.join(chars)}, which Spark's file source reads as a "
            "pattern (it read other files twice); land it again under a name without them"
        )
    if entry.kind == "file" and (extension(entry.name) in COMPRESSED or entry.size >= LONGEST_LINE):
        return _unreadable(entry)
    return None


def _unreadable(entry: Item) -> str | None:
    """Why Spark could not read this file's bytes as its name says, or None (`measured`): a
    file that does not decompress failed every try of its batch, and a line of hundreds of
    megabytes ran the JVM out of memory at every try, so one file stopped its stream for good."""
    try:
        found = measured(entry)
    except FileNotFoundError:
        return None  # moved away meanwhile: nothing to read
    except ValueError as exc:
        return str(exc)
    if found.too_long is None:
        return None
    return (
        f"it holds a line of {found.too_long:,} bytes, and ingestion reads lines shorter than "
        f"{LONGEST_LINE:,} (Spark holds a line whole in memory); land it again as one JSON "
        "object per line"
    )


def hidden(name: str) -> bool:
    """Spark's file source skips names starting with ``.`` or ``_``: the landing contract
    writes a file under such a name, then renames it (on a store, one put needs neither)."""
    return name.startswith((".", "_"))


def landing_files(folder: Where, listed: list[Item] | None = None) -> list[Item]:
    """The files of a landing folder that bronze ingestion reads: every regular file whose name
    is not `hidden`, whatever its extension, unless it is refused (`landing_refusal`).
    ``listed``: the folder's entries, when the caller listed it already."""
    return [
        e
        for e in (locations.items(folder) if listed is None else listed)
        if e.kind == "file" and not hidden(e.name) and landing_refusal(e) is None
    ]


def landing_key(place: Where) -> str:
    """A landing file as bronze's ``_source_file`` names it, once read back with
    `locations.from_spark_uri`: its resolved local path, or ``s3://bucket/key``."""
    return locations.canonical(place)


def screen_landing(folder: Where) -> list[tuple[Location, str]]:
    """Move each entry of ``folder`` that ingestion must not read into ``folder/_refused/``,
    under its own name (a suffix when it is taken); returns (where it went, why) for each.

    Run before every ingestion and, in a continuous run, every half second: Spark's source
    lists the folder by itself, so an entry landed between two screens may be listed first.
    Moved aside before its batch reads it, it is skipped (`landing_lines`); read first, the
    landing accounting names its rows."""
    moved = []
    refused = Location.of(folder) / REFUSED_DIR
    for entry in locations.items(folder):
        if hidden(entry.name) or entry.kind == "folder":
            continue
        why = landing_refusal(entry)
        if why is None:
            continue
        target, n = refused / entry.name, 1
        while locations.exists(target) or locations.is_link(target):
            target, n = refused / f"{entry.name}.{n}", n + 1
        try:
            locations.move(entry.place, target)  # a link itself, never what it points to
        except FileNotFoundError:
            continue  # moved by another screen at the same moment
        moved.append((target, why))
    return moved


def bronze_schema(schema: StreamSchema) -> T.StructType:
    return T.StructType([*schema.struct.fields, *LINEAGE, *POSITION, *IDENTITY])


class BronzeBatchWriter:
    """The foreachBatch function; remembers how many rows each batch wrote where."""

    def __init__(
        self,
        spark: SparkSession,
        cfg: TidemarkConfig,
        schema: StreamSchema,
        landing: Where | None = None,
    ) -> None:
        self.cfg, self.schema, self.landing = cfg, schema, landing
        paths = cfg.paths
        self.bronze = paths.table("bronze", schema.name)
        self.quarantine = paths.table("quarantine", schema.name)
        self.checkpoint = paths.checkpoint(query_name(schema.name))
        self.written: dict[int, tuple[int, int]] = {}
        self.parse = line_parser(schema)
        ensure_table(spark, self.bronze, bronze_schema(schema), ROW_TRACKING)
        ensure_table(spark, self.quarantine, QUARANTINE_SCHEMA)
        add_missing_columns(spark, self.bronze, bronze_schema(schema))  # older data roots
        add_missing_columns(spark, self.quarantine, QUARANTINE_SCHEMA)
        resolve(
            spark.createDataFrame([], schema.struct), f"stream {schema.name}", schema.expectations
        )

    def __call__(self, lines: DataFrame, batch_id: int) -> None:
        with stoppable(f"stream {self.schema.name}"):
            try:
                self._write(lines, batch_id)
            except Exception as exc:
                # A file landed after the last screen and listed by the batch could not be read
                # (it does not decompress): moved aside now, the batch reads the rest without it
                # (`ignoreMissingFiles`), instead of failing every try, and the query with it
                if (
                    self.landing is None
                    or "FAILED_READ_FILE" not in str(exc)
                    or not screen_landing(self.landing)
                ):
                    raise
                LOG.warning(
                    "stream %s: batch %d read a file that was then refused; reading it again",
                    self.schema.name,
                    batch_id,
                )
                self._write(lines, batch_id)

    def _write(self, lines: DataFrame, batch_id: int) -> None:
        without_adaptive_plans(lines)
        parsed = (
            self.parse(lines)
            .withColumn("_ingested_at", F.current_timestamp())
            .withColumn("_ingest_batch_id", F.lit(batch_id).cast("long"))
            .persist()
        )
        try:
            lineage = [f.name for f in LINEAGE + POSITION + IDENTITY]
            columns = [*self.schema.field_names, *lineage]
            valid = parsed.where(F.col("_reason").isNull())
            # the stream's expectations, on the valid rows (raises before any write on 'fail')
            good, failed, found = split(
                valid, f"stream {self.schema.name} (batch {batch_id})", self.schema.expectations
            )
            bad = parsed.where(F.col("_reason").isNotNull())
            if failed is not None:
                bad = bad.unionByName(failed)
            # the counts come with the conflict check's aggregation (over every parsed row
            # when no expectation took rows out: then the good rows are the rows with no reason)
            good, conflicting, kept_rows, bad_rows = self._conflicts(
                good, parsed if failed is None else None
            )
            if conflicting is not None:
                bad = bad.unionByName(conflicting)
            # raw_line is text every reader can decode (bytes that are not UTF-8 become U+FFFD:
            # delta-rs refused the column); raw_bytes keeps them exactly
            bad = bad.select(
                F.make_valid_utf8(F.col(LINE)).alias("raw_line"),
                F.col("_reason").alias("reason"),
                *[f.name for f in LINEAGE],
                F.col(LINE).cast("binary").alias("raw_bytes"),
                *[f.name for f in POSITION + IDENTITY],
            )
            # keyed by the checkpoint's identity: a rebuilt checkpoint's batch 0 is new data
            identity = query_id(self.checkpoint)
            app_id = bronze_app_id(identity)
            record(
                self.cfg,
                result_rows(
                    query_name(self.schema.name),
                    identity,
                    batch_id,
                    self.schema.expectations,
                    found,
                ),
            )
            written = (kept_rows, bad.count() if bad_rows is None else bad_rows)
            # A layer gets no commit for a batch with none of its rows: an empty commit costs a
            # Delta transaction, about what a small write costs (most batches of a continuous
            # run have no bad line). The batch's rows decide it, so a replay decides the same.
            still_owned(self.checkpoint)  # on a store: this run's lease, before any commit
            if written[0]:
                append_once(good.select(*columns), self.bronze, app_id, batch_id)
            if written[1]:
                append_once(bad, self.quarantine, app_id, batch_id)
            self.written[batch_id] = written
        finally:
            parsed.unpersist()

    def _conflicts(
        self, good: DataFrame, parsed: DataFrame | None
    ) -> tuple[DataFrame, DataFrame | None, int, int | None]:
        """(rows bronze keeps, copies that conflict with them or None, how many rows are kept,
        how many of ``parsed``'s rows have a reason, or None when not counted here).

        ``parsed``, when given, is the batch's every parsed row, ``good`` those with no
        reason: then one aggregation counts both (a count is a Spark action, about 0.1 s
        whatever a batch holds). With a conflict, the caller counts the bad rows itself.

        Copies of one event (equal dedup keys) in one batch whose fields differ: the stream's
        deduplication would keep whichever it met first and the batch recomputation another, so
        the rows of one key would disagree for good. Bronze keeps the copies whose fields sort
        first (as JSON text), the same in every replay, and quarantines the others with the
        reason, so the difference is on record. Copies in different batches need no choice:
        both sides keep the earlier batch's.

        One aggregation per batch counts the rows and the keys in conflict (it replaces the
        plain count): copies differ when the least and the greatest 64-bit hash of their fields
        differ (a hash, not the fields as JSON text: that aggregation cost 2.1 s per million
        lines, the hash 0.9 s; two differing copies go unseen only if their hashes collide).
        Only a batch with a conflict reads further: the few keys in conflict are joined to its
        rows as a broadcast, so bronze's write keeps the scan's partitions (a window over the
        batch shuffled it, and the shuffle's empty partitions left an empty parquet file
        outside the table's log).
        """
        key = self.schema.key
        rows_of = good if parsed is None else parsed
        kept = F.col("_reason").isNull() if parsed is not None else F.lit(True)
        if not key:
            rows, bad_rows = rows_of.agg(F.count_if(kept), F.count_if(~kept)).first()
            return good, None, rows, bad_rows if parsed is not None else None
        fields = [F.col(c) for c in self.schema.field_names]
        digest = F.xxhash64(*fields)
        per_key = rows_of.groupBy(kept.alias("_kept"), *key).agg(
            F.count(F.lit(1)).alias("_rows"),
            F.min(digest).alias("_least"),
            F.max(digest).alias("_greatest"),
        )
        clash = F.col("_kept") & (F.col("_least") != F.col("_greatest"))
        totals = per_key.agg(
            F.sum(F.when(F.col("_kept"), F.col("_rows"))).alias("rows"),
            F.sum(F.when(~F.col("_kept"), F.col("_rows"))).alias("bad"),
            F.count_if(clash).alias("clashes"),
        )
        rows, bad_rows, clashes = totals.first()
        if not clashes:
            return good, None, rows or 0, (bad_rows or 0) if parsed is not None else None
        payload = F.to_json(F.struct(*fields))
        clashing = per_key.where(clash).select(*key)
        first = (
            good.join(F.broadcast(clashing), on=list(key), how="left_semi")
            .groupBy(*key)
            .agg(F.min(payload).alias("_first"))
        )
        marked = good.join(F.broadcast(first), on=list(key), how="left").withColumn(
            "_conflict", F.col("_first").isNotNull() & (payload != F.col("_first"))
        )
        kept_rows = marked.where(~F.col("_conflict")).drop("_first", "_conflict")
        names = ", ".join(key)
        conflicting = (
            marked.where(F.col("_conflict"))
            .drop("_first", "_conflict")
            .withColumn(
                "_reason",
                F.lit(
                    f"duplicate {names} with a different payload (bronze keeps the "
                    "copy of the batch whose fields sort first)"
                ),
            )
        )
        return kept_rows, conflicting, kept_rows.count(), None


def landing_lines(
    spark: SparkSession,
    cfg: TidemarkConfig,
    schema: StreamSchema,
    max_files_per_trigger: int | None = None,
) -> DataFrame:
    landing = cfg.paths.landing_dir(schema.name)
    locations.make_folder(landing)
    screen_landing(landing)
    # A line ends at '\n' only, as the landing accounting counts it: a CR is a byte of its line
    # (Spark's default also ends one at a lone '\r', splitting a line and dropping the byte)
    reader = spark.readStream.format("text").option("lineSep", "\n")
    # An entry listed by Spark's source but moved aside by a screen before its batch read it
    # (a continuous run screens every half second) is skipped, not read: without this every
    # try of that batch failed on the missing file and the query was held. Nothing else
    # leaves landing while it is unread: retention archives only files of committed batches,
    # and the accounting counts the refused entry's lines.
    reader = reader.option("ignoreMissingFiles", "true")
    if not Location.of(landing).on_store:
        # the local file system without checksum files: Hadoop's checksum layer names a
        # file's .crc by parsing its name as a URI, and a ':' in it failed the batch. (Not for
        # a store: S3A, made with these options, takes Hadoop's local file system for its
        # buffers, and a raw one failed its writes.)
        reader = reader.option("fs.file.impl", "org.apache.hadoop.fs.RawLocalFileSystem").option(
            "fs.file.impl.disable.cache", "true"
        )
    if max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", max_files_per_trigger)
    return reader.load(spark_path(landing)).select(
        F.col("value").alias(LINE),
        F.col("_metadata.file_path").alias("_source_file"),
        F.lit(None).cast("int").alias("_source_partition"),
        F.lit(None).cast("long").alias("_source_offset"),
        F.col("_metadata.file_size").alias("_source_size"),
        F.col("_metadata.file_modification_time").alias("_source_modified"),
    )


def kafka_lines(spark: SparkSession, cfg: TidemarkConfig, schema: StreamSchema) -> DataFrame:
    """A topic's records as lines: the value's bytes as they are (a value that is not UTF-8 is
    quarantined with them; no value at all is an empty line), its partition and offset."""
    from streaming_jobs.storage.kafka import spark_options, topic_of

    topic = topic_of(cfg, schema)
    reader = spark.readStream.format("kafka")
    for key, value in spark_options(cfg, topic).items():
        reader = reader.option(key, value)
    return reader.load().select(
        F.coalesce(F.col("value").cast("string"), F.lit("")).alias(LINE),
        F.concat(F.lit("kafka:"), F.col("topic")).alias("_source_file"),
        F.col("partition").alias("_source_partition"),
        F.col("offset").alias("_source_offset"),
        F.lit(None).cast("long").alias("_source_size"),
        F.lit(None).cast("timestamp").alias("_source_modified"),
    )


def bronze_writer(
    spark: SparkSession,
    cfg: TidemarkConfig,
    schema: StreamSchema,
    max_files_per_trigger: int | None = None,
) -> tuple[DataStreamWriter, BronzeBatchWriter]:
    from streaming_jobs.storage.kafka import source_of

    landing = None
    if source_of(cfg, schema) == "kafka":
        lines = kafka_lines(spark, cfg, schema)
    else:
        lines = landing_lines(spark, cfg, schema, max_files_per_trigger)
        landing = cfg.paths.landing_dir(schema.name)
    sink = BronzeBatchWriter(spark, cfg, schema, landing)
    writer = (
        lines.writeStream.queryName(query_name(schema.name))
        .option("checkpointLocation", spark_path(cfg.paths.checkpoint(query_name(schema.name))))
        .foreachBatch(sink)
    )
    return writer, sink
