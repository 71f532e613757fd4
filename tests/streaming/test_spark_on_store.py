"""Spark on the project's real S3-compatible server, through Hadoop's S3A as tidemark sets it
(`use_object_store`): a stateful stream whose Delta source, Delta sink and RocksDB checkpoint
are all ``s3a://`` objects, run in two increments and once more with nothing new, gives each
window exactly once; the keys reach neither Spark's conf nor a plan."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta, timezone

from pyspark.sql import functions as F

from streaming_jobs.core.checkpoints import last_committed_batch, query_id
from streaming_jobs.core.locations import Location
from streaming_jobs.storage.spark import use_object_store
from streaming_jobs.core.stores import keys

BASE = datetime(2026, 11, 1, tzinfo=timezone.utc)


def _events(start: int, count: int) -> list[tuple[int, str, datetime]]:
    return [(i, f"k{i % 3}", BASE + timedelta(seconds=7 * i)) for i in range(start, start + count)]


def _windows_closed(events, watermark_delay: timedelta) -> Counter:
    """The independent answer: per (minute, key) counts of the windows the watermark closed."""
    watermark = max(ts for _, _, ts in events) - watermark_delay
    counts = Counter()
    for _, key, ts in events:
        minute = ts.replace(second=0)
        if minute + timedelta(minutes=1) <= watermark:
            counts[(minute, key)] += 1
    return counts


def test_a_stateful_stream_runs_with_its_tables_and_checkpoint_on_the_store(spark, s3_bucket):
    _, s3_cfg, _, bucket = s3_bucket
    use_object_store(spark, s3_cfg)
    root = f"s3a://{bucket}/lake"
    schema = "id long, key string, ts timestamp"

    def land(rows):
        spark.createDataFrame(rows, schema).write.format("delta").mode("append").save(
            f"{root}/bronze"
        )

    def run():
        counted = (
            spark.readStream.format("delta")
            .load(f"{root}/bronze")
            .withWatermark("ts", "30 seconds")
            .groupBy(F.window("ts", "1 minute"), "key")
            .agg(F.count("*").alias("n"))
        )
        query = (
            counted.writeStream.format("delta")
            .outputMode("append")
            .option("checkpointLocation", f"{root}/checkpoints/minutely")
            .trigger(availableNow=True)
            .start(f"{root}/gold")
        )
        query.awaitTermination()
        return query

    first, second = _events(0, 300), _events(300, 200)
    land(first)
    run()
    land(second)
    query = run()
    run()  # nothing new: nothing written again

    gold = spark.read.format("delta").load(f"{root}/gold").collect()
    got = Counter()
    for row in gold:
        got[(row["window"]["start"].replace(tzinfo=timezone.utc), row["key"])] += row["n"]
    assert len(gold) == len(got)  # each window once
    assert got == _windows_closed(first + second, timedelta(seconds=30))

    # tidemark reads the checkpoint Spark wrote on the store, as it reads a local one
    checkpoint = Location.of(f"s3://{bucket}/lake/checkpoints/minutely", s3_cfg.s3)
    assert query_id(checkpoint) == str(query.id)
    assert last_committed_batch(checkpoint) == query.lastProgress["batchId"] >= 1

    secret = keys(s3_cfg).secret_access_key
    conf = "\n".join(f"{k}={v}" for k, v in spark.sparkContext.getConf().getAll())
    assert secret not in conf and keys(s3_cfg).access_key_id not in conf
    assert secret not in str(query.lastProgress)
    plan = spark.read.format("delta").load(f"{root}/gold")._jdf.queryExecution().toString()
    assert secret not in plan and bucket in plan


def test_lake_tables_are_made_and_written_once_on_the_store(spark, s3_bucket):
    from pyspark.sql import types as T

    from streaming_jobs.core import locations
    from streaming_jobs.storage import lake

    _, s3_cfg, _, bucket = s3_bucket
    use_object_store(spark, s3_cfg)
    table = s3_cfg.with_data_root(f"s3://{bucket}/root").paths.table("gold", "t")
    schema = T.StructType([T.StructField("k", T.StringType()), T.StructField("n", T.LongType())])

    # a creation killed before its first commit leaves keys under _delta_log and no commit
    locations.write_bytes(table / "_delta_log" / "_commits" / ".leftover.tmp", b"")
    assert not locations.is_delta_table(table)
    assert lake.clear_unborn_log(table, wait_seconds=0.5)
    assert not locations.exists(table / "_delta_log")

    lake.ensure_table(spark, table, schema, properties=lake.ROW_TRACKING)
    lake.ensure_table(spark, table, schema, properties=lake.ROW_TRACKING)  # there already
    assert locations.is_delta_table(table) and locations.is_file(
        table / "_delta_log" / f"{0:020d}.json"
    )

    rows = spark.createDataFrame([("a", 1), ("b", 2)], schema)
    for _ in range(2):  # a replayed batch: the second append of (app, 7) writes nothing
        lake.append_once(rows, table, "app", 7)
    changed = spark.createDataFrame([("a", 10), ("c", 3)], schema)
    for _ in range(2):
        lake.merge_once(changed, table, ("k",), "app", 8)
    assert lake.add_missing_columns(spark, table, schema.add("note", T.StringType())) == ["note"]
    got = {(r.k, r.n, r.note) for r in lake.read_table(spark, table).collect()}
    assert got == {("a", 10, None), ("b", 2, None), ("c", 3, None)}
    props = spark.sql(f"describe detail delta.`{table.spark}`").first()["properties"]
    assert props.get("delta.enableRowTracking") == "true"


def test_the_lake_made_by_sql_equals_the_lake_spark_makes_here_on_the_store(spark, cfg, s3_bucket):
    """What tidemark-dbt asks a shared endpoint to run for a data root on the store
    (`creation_statements`, run here by the same Spark SQL) makes each table as `ensure_lake`
    does (tests/orchestration/test_recon.py has the endpoint itself do it, on a local disk)."""
    from helpers import on_store, table_shape
    from streaming_jobs.runtime.tables import creation_statements, ensure_lake, missing
    from streaming_jobs.storage import ops_tables

    bucket = s3_bucket[3]
    store = on_store(spark, cfg, s3_bucket, "by-sql")
    reference = store.with_data_root(f"s3://{bucket}/reference")
    made = ensure_lake(spark, reference)  # each job's gold schema made by Spark, and kept
    ops_tables.ensure_all(store)
    statements = creation_statements(store, missing(store))
    assert statements is not None and all(f"s3a://{bucket}/by-sql/" in s for s in statements)
    for statement in statements:
        spark.sql(statement)
    assert missing(store) == []
    for item in made:
        assert table_shape(spark, store, item) == table_shape(spark, reference, item), item
