"""Delta tables of the lake: creation with the properties tidemark relies on, idempotent writes.

Tables are addressed by path (the streaming JVM keeps no metastore): a local folder or a place
on the data root's object store (`Where`; Spark reads the second through S3A). Bronze tables carry row
tracking so that each row's commit version (``_metadata.row_commit_version``) can be matched with
the stream batches that read it: that is how reconciliation knows which events a job dropped
as late.
"""

from __future__ import annotations

import time
import uuid

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from streaming_jobs.core import locations
from streaming_jobs.core.delta_log import marker_metadata
from streaming_jobs.core.locations import Location, Where

ROW_TRACKING = {"delta.enableRowTracking": "true"}


def spark_path(path: Where) -> str:
    """How Spark addresses a table: its local path, or ``s3a://bucket/key``."""
    return Location.of(path).spark


def _log(path: Where) -> Location:
    return Location.of(path) / "_delta_log"


def _has_commit(log: Location) -> bool:
    names = locations.names(log)  # [] when absent, or removed meanwhile (an unborn log cleared)
    return (
        any(n[:20].isdigit() and not n.startswith(".") for n in names)
        or "_last_checkpoint" in names
    )


def clear_unborn_log(path: Where, wait_seconds: float = 5.0) -> bool:
    """Remove a ``_delta_log`` that holds no commit (a creation killed before its first commit,
    found by the fault harness): Delta then takes the folder for a table it cannot read and
    refuses to create one there, forever. A creator still at work commits within milliseconds,
    so a log that stays empty for ``wait_seconds`` is left over. True if one was removed."""
    log = _log(path)
    if not locations.is_dir(log) or _has_commit(log):
        return False
    deadline = time.monotonic() + wait_seconds
    while time.monotonic() < deadline:
        time.sleep(0.25)
        if not locations.is_dir(log) or _has_commit(log):
            return False
    if log.on_store:
        # no rename on a store: the leftovers go key by key (a creator that starts now writes
        # its first commit whole, by one put, and the next check sees it)
        locations.delete_tree(log)
        return True
    aside = log.path.with_name(f".unborn-log-{uuid.uuid4().hex[:8]}")
    try:
        log.path.rename(aside)  # one step: a creator racing us sees no log, not half of one
    except OSError:
        return False
    locations.delete_tree(aside)
    return True


def ensure_table(
    spark: SparkSession,
    path: Where,
    schema: T.StructType,
    properties: dict[str, str] | None = None,
    partition_by: list[str] | None = None,
) -> None:
    """Create an empty Delta table at ``path`` unless one is there.

    Two processes may create the same table at once (a job's first run and the SQL endpoint's
    lake check): the loser's commit conflicts, and its retry finds the table made. A creation
    killed before its first commit is cleared first (`clear_unborn_log`).
    """
    from delta.tables import DeltaTable

    clear_unborn_log(path)

    for attempt in range(5):
        builder = DeltaTable.createIfNotExists(spark).location(spark_path(path)).addColumns(schema)
        for key, value in (properties or {}).items():
            builder = builder.property(key, value)
        if partition_by:
            builder = builder.partitionedBy(*partition_by)
        try:
            builder.execute()
            return
        except Exception as exc:  # noqa: BLE001 - only a concurrent creation is retried
            concurrent = any(
                word in str(exc)
                for word in (
                    "DELTA_PROTOCOL_CHANGED",
                    "DELTA_METADATA_CHANGED",
                    "Concurrent",
                    "DELTA_CONCURRENT",
                )
            )
            if not concurrent or attempt == 4:
                raise
            time.sleep(0.2 * (attempt + 1))


def ensure_properties(spark: SparkSession, path: Where, properties: dict[str, str]) -> None:
    """Set the table properties the table at ``path`` lacks or holds otherwise (one commit, none
    when every one is set). The properties are read from the log by delta-rs: Delta's
    ``DESCRIBE DETAIL`` rebuilds the table's state, the first time in a process a Spark job of
    7.8 s, which held up the start of every job after it in a continuous run."""
    from streaming_jobs.core.locations import delta_table

    have = delta_table(path).metadata().configuration or {}
    missing = {k: v for k, v in properties.items() if have.get(k) != v}
    if missing:
        pairs = ", ".join(f"'{k}' = '{v}'" for k, v in missing.items())
        spark.sql(f"ALTER TABLE delta.`{spark_path(path)}` SET TBLPROPERTIES ({pairs})")


def add_missing_columns(spark: SparkSession, path: Where, schema: T.StructType) -> list[str]:
    """Add the columns of ``schema`` that the table at ``path`` lacks (a table made by an older
    tidemark); returns their names."""
    from delta.tables import DeltaTable

    have = set(DeltaTable.forPath(spark, spark_path(path)).toDF().columns)
    missing = [f for f in schema.fields if f.name not in have]
    if missing:
        columns = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in missing)
        spark.sql(f"ALTER TABLE delta.`{spark_path(path)}` ADD COLUMNS ({columns})")
    return [f.name for f in missing]


def append_once(df: DataFrame, path: Where, app_id: str, version: int) -> None:
    """Append ``df`` unless this (app_id, version) was committed before: replays are no-ops.

    Used inside foreachBatch with the batch id as version, which makes a re-run batch after a
    crash write nothing twice (Delta's idempotent writes, ``txnAppId``/``txnVersion``).
    """
    (
        df.write.format("delta")
        .mode("append")
        .option("txnAppId", app_id)
        .option("txnVersion", version)
        .save(spark_path(path))
    )


def append_marked(
    df: DataFrame, path: Where, app_id: str, version: int, partition_by: tuple[str, ...] = ()
) -> None:
    """Append ``df`` with tidemark's own idempotency marker, (``app_id``, ``version``) in the
    commit's ``userMetadata`` (`delta_log.batch_written` finds it again).

    No ``txnAppId``: Delta would rebuild the table's whole state to look its key up, three
    Spark jobs before every write. The caller checks the marker first, holding the lock that
    makes it the only writer of ``app_id`` (a local disk's ``flock``)."""
    writer = (
        df.write.format("delta")
        .mode("append")
        .option("userMetadata", marker_metadata(app_id, version))
    )
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    writer.save(spark_path(path))


def merge_once(
    df: DataFrame, path: Where, keys: tuple[str, ...], app_id: str, version: int
) -> None:
    """Upsert ``df`` into the table on ``keys`` unless (app_id, version) was committed before.

    A micro-batch replayed after a crash then changes nothing twice, whatever the update does.
    Delta checks its key inside the commit; its lookup reads the table's transactions from its
    state, a cost that grows with the log (0.56 s of an update-mode job's batch of 2.16 s,
    docs/benchmarks.md). `merge_marked` is the cheaper way where a lock keeps one writer.
    """
    _merge(
        df,
        path,
        keys,
        {
            "spark.databricks.delta.write.txnAppId": app_id,
            "spark.databricks.delta.write.txnVersion": str(version),
        },
    )


def merge_marked(
    df: DataFrame, path: Where, keys: tuple[str, ...], app_id: str, version: int
) -> None:
    """Upsert ``df`` into the table on ``keys`` with tidemark's marker, (``app_id``,
    ``version``) in the commit's ``userMetadata``, as `append_marked` appends. The caller
    checks the marker first (`delta_log.batch_written`), holding the lock that makes it the only
    writer of ``app_id``."""
    _merge(
        df,
        path,
        keys,
        {"spark.databricks.delta.commitInfo.userMetadata": marker_metadata(app_id, version)},
    )


def _merge(df: DataFrame, path: Where, keys: tuple[str, ...], settings: dict[str, str]) -> None:
    """MERGE ``df`` on ``keys`` (update every matched row, insert the rest). Delta takes a
    commit's key and metadata from session settings only, so the MERGE runs in a session of its
    own (``newSession``: same context, its own settings): they can never tag another write, in
    this query or any other."""
    from delta.tables import DeltaTable

    session = df.sparkSession.newSession()
    for key, value in settings.items():
        session.conf.set(key, value)
    condition = " and ".join(f"t.`{k}` <=> s.`{k}`" for k in keys)
    (
        DeltaTable.forPath(session, spark_path(path))
        .alias("t")
        .merge(df.alias("s"), condition)
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
    )


def read_table(spark: SparkSession, path: Where) -> DataFrame:
    return spark.read.format("delta").load(spark_path(path))
