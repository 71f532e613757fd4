"""The gold side of a job: bronze as a stream in, the job's ``build``, a Delta table out.

Every write is exactly-once across restarts: a replayed batch writes nothing twice.
- Append jobs on a local disk append each micro-batch with tidemark's own marker (`AppendBatch`:
  the query id and batch id in the commit, checked in the table's newest commits).
- Append jobs on an object store write through the Delta sink (Delta's ``txn`` key, looked up
  in the table's state and checked again at the commit).
- Update jobs upsert each micro-batch with a MERGE on the job's keys (`UpsertBatch`), marked
  with tidemark's marker on a local disk and with Delta's key on an object store, for the same
  reasons as an append.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter

from streaming_jobs.core.checkpoints import batch_metadata, query_id, still_owned
from streaming_jobs.runtime.changes import check_before_start
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.core.delta_log import (
    batch_written,
    latest_version,
    merge_app_id,
    sink_app_id,
    txn_of,
    version_of_batch,
)
from streaming_jobs.storage.expectations import counts, guard, record, resolve, result_rows
from streaming_jobs.core.interrupts import stoppable
from streaming_jobs.spec import JobSpec
from streaming_jobs.storage.lake import (
    append_marked,
    ensure_properties,
    ensure_table,
    merge_marked,
    merge_once,
    spark_path,
)
from streaming_jobs.core.locations import Location, Where, is_delta_table
from streaming_jobs.storage.restores import fault_point
from streaming_jobs.storage.spark import without_adaptive_plans
from streaming_jobs.runtime.tables import remember_gold_schema

LOG = logging.getLogger("tidemark.gold")

# A partitioned gold table's files go under short random folders, not Hive-style
# <column>=<value> ones: its partition values live in the Delta log, so no value can make a path
# the file system refuses (a 300-character event type made a folder name too long, and the
# batch failed on every retry) or one that escapes; readers see the same partitions.
RANDOM_PREFIXES = {"delta.randomizeFilePrefixes": "true"}

# Read every new bronze version whole in one batch (Delta's default cuts at 1000 files): the
# recorded version range of each batch then says exactly which bronze rows it read.
UNLIMITED_FILES = 1_000_000_000


def gold_query(spark: SparkSession, cfg: TidemarkConfig, spec: JobSpec) -> DataFrame:
    """The job's query over its bronze streams (not started)."""
    paths = cfg.paths
    frames = []
    for source in spec.sources:
        bronze = paths.table("bronze", source)
        if not is_delta_table(bronze):
            raise FileNotFoundError(
                f"job {spec.name}: its source table {bronze} does not exist yet; materialize "
                f"bronze/{source} first (it creates the table on its first run)"
            )
        frames.append(
            spark.readStream.format("delta")
            .option("maxFilesPerTrigger", UNLIMITED_FILES)
            .load(spark_path(bronze))
        )
    return spec.apply(*frames)


@dataclass(frozen=True)
class Place:
    """Where a job's query runs: its name (the query's, and its rows' in the ops tables), its
    checkpoint and its gold table. `live` is the job's own; a rebuild beside it runs in another
    (`streaming_jobs.operations.shadow`)."""

    name: str
    checkpoint: Where
    target: Where

    @classmethod
    def live(cls, cfg: TidemarkConfig, spec: JobSpec) -> "Place":
        return cls(spec.name, cfg.paths.checkpoint(spec.name), cfg.paths.table("gold", spec.name))


def gold_writer(
    spark: SparkSession, cfg: TidemarkConfig, spec: JobSpec, place: Place | None = None
) -> DataStreamWriter:
    """The job's query, checked against its checkpoint's state (`changes.check_before_start`:
    a new version the state cannot take is refused before any batch), ready to start. Called
    holding the checkpoint's lock. ``place``: the job's own unless given."""
    place = place or Place.live(cfg, spec)
    result = gold_query(spark, cfg, spec)
    check_before_start(cfg, spec, result, place.checkpoint)
    resolve(result, f"job {spec.name}", spec.expectations)
    # 'fail' rules raise inside the query (the batch never commits); counts are observed per
    # batch (append) or counted by the MERGE's foreachBatch (update)
    result = guard(
        result, f"job {spec.name}", spec.expectations, observe=spec.output_mode == "append"
    )
    target = place.target
    properties = {**spec.table_properties, **(RANDOM_PREFIXES if spec.partition_by else {})}
    remember_gold_schema(cfg, spec, result.schema)  # for tidemark-dbt on a shared endpoint
    ensure_table(spark, target, result.schema, properties, list(spec.partition_by))
    if spec.partition_by:
        ensure_properties(spark, target, RANDOM_PREFIXES)  # a table an older tidemark made
    writer = result.writeStream.queryName(place.name).option(
        "checkpointLocation", spark_path(place.checkpoint)
    )
    if spec.output_mode == "update":
        return writer.outputMode("update").foreachBatch(UpsertBatch(spec, place, cfg))
    if not Location.of(target).on_store:
        return writer.outputMode("append").foreachBatch(AppendBatch(spec, place))
    # On a store a run's lease can lapse while it is paused between a check and its commit:
    # Delta's key, checked again inside the commit, keeps that late commit from doubling a batch
    if spec.partition_by:
        writer = writer.partitionBy(*spec.partition_by)
    return writer.format("delta").outputMode("append").option("path", spark_path(target))


class AppendBatch:
    """foreachBatch for append-mode jobs on a local disk: append each micro-batch once.

    A batch is appended with the pair (query id, batch id) in its commit (`lake.append_marked`).
    A replayed batch (the run died after its commit, before the checkpoint recorded it) finds its
    pair in the table's newest commits (`delta_log.batch_written`) and writes nothing. This
    replaces Delta's own key, whose lookup rebuilds the table's state: three Spark jobs of a
    batch's four when it carries a handful of rows. It is safe here because the checkpoint's
    ``flock`` makes this run the table's only writer of the query id until it exits: a paused
    run keeps the lock, and a killed one cannot commit."""

    def __init__(self, spec: JobSpec, place: Place) -> None:
        self.target, self.checkpoint, self.name = place.target, place.checkpoint, place.name
        self.partition_by = spec.partition_by

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        # the checkpoint's identity, read now: a restored or rebuilt checkpoint has a new one
        app_id = query_id(self.checkpoint)
        since = (batch_metadata(self.checkpoint, batch_id) or {}).get("batchTimestampMs")
        without_adaptive_plans(batch)
        with stoppable(f"job {self.name}"):
            if batch_written(self.target, app_id, batch_id, since):
                LOG.info(
                    "job %s: batch %d is in its gold table already; not written again",
                    self.name,
                    batch_id,
                )
                # run it all the same: its state stores must commit (Spark 4.2 fails a batch
                # whose stateful partitions never ran)
                batch.write.format("noop").mode("overwrite").save()
                return
            append_marked(batch, self.target, app_id, batch_id, self.partition_by)
        # the chaos harness: a crash before the checkpoint's commit, after a commit that wrote
        # rows (an append of none commits nothing: the kill would fall between two batches)
        fault_point("gold.committed", lambda: self._committed(app_id, batch_id))

    def _committed(self, app_id: str, batch_id: int) -> bool:
        """Whether the table's newest commit is this batch's (read for the chaos harness only)."""
        newest = latest_version(self.target)
        return newest is not None and txn_of(self.target, newest, app_id) == batch_id


def sink_version_of(cfg: TidemarkConfig, spec: JobSpec, target: Where | None = None):
    """For a progress row of ``spec``: the gold version holding its batch (see `delta_log`);
    ``target``: the job's gold table unless given (a rebuild's shadow)."""
    target = target or cfg.paths.table("gold", spec.name)

    def resolve(row: dict) -> int | None:
        if row.get("query_id") is None or row.get("batch_id") is None:
            return None
        return version_of_batch(target, sink_app_id(spec, row["query_id"]), row["batch_id"])

    return resolve


class UpsertBatch:
    """foreachBatch for update-mode jobs: MERGE the batch's rows on the job's keys.

    On a local disk the MERGE carries tidemark's marker and a replayed batch finds it in the
    table's newest commits (`delta_log.batch_written`), as `AppendBatch` does, under the same
    ``flock``. On an object store Delta's key is checked again inside the commit: a run whose
    lease lapsed while it paused cannot commit a batch twice."""

    def __init__(self, spec: JobSpec, place: Place, cfg: TidemarkConfig) -> None:
        self.keys, self.target = spec.keys, place.target
        self.checkpoint, self.name = place.checkpoint, place.name
        self.spec, self.cfg = spec, cfg
        self.marked = not Location.of(place.target).on_store

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        # Keyed by the checkpoint's identity, read now (the query wrote it when it started):
        # a restored or rebuilt checkpoint restarts its batch ids under a new key, so its
        # writes are never skipped as done.
        app_id = merge_app_id(query_id(self.checkpoint))
        batch = batch.persist()
        try:
            with stoppable(f"job {self.name}"):
                # Evaluate the whole batch first: its state stores must commit even when
                # the MERGE of a replayed batch is skipped (Spark 4.2 fails a batch whose
                # stateful partitions never ran), and the MERGE then reads cached rows.
                rows = batch.count()
                if self.spec.expectations:  # 'fail' rules already raised inside the query
                    identity = query_id(self.checkpoint)
                    record(
                        self.cfg,
                        result_rows(
                            self.name,
                            identity,
                            batch_id,
                            self.spec.expectations,
                            counts(batch, self.spec.expectations),
                        ),
                    )
                still_owned(self.checkpoint)  # on a store: this run's lease, before the commit
                if not self.marked:
                    merge_once(batch, self.target, self.keys, app_id, batch_id)
                    return
                if not rows:
                    # a MERGE of no rows commits nothing here (tidemark's marker lives in a
                    # commit), yet it ran its Spark jobs: 0.9 s warm, 5.5 s as a process's
                    # first MERGE. (Delta's key, above, commits its transaction all the same.)
                    return
                since = (batch_metadata(self.checkpoint, batch_id) or {}).get("batchTimestampMs")
                if batch_written(self.target, app_id, batch_id, since):
                    LOG.info(
                        "job %s: batch %d is in its gold table already; not merged again",
                        self.name,
                        batch_id,
                    )
                    return
                merge_marked(batch, self.target, self.keys, app_id, batch_id)
                fault_point("gold.committed")  # the chaos harness, as in AppendBatch
        finally:
            batch.unpersist()
