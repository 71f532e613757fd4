"""The SQL that has a shared endpoint create a lake table, and the gold schemas it relies on
(tables made from it are compared with Spark's own in tests/orchestration/test_recon.py)."""

from __future__ import annotations

import os
import time

from pyspark.sql import types as T

from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.runtime import tables
from streaming_jobs.storage.registry import registry


def test_any_column_name_type_and_property_is_written_as_spark_sql_reads_it():
    schema = T.StructType(
        [
            T.StructField("a `b` c", T.StringType()),
            T.StructField("n", T.LongType(), nullable=False),
            T.StructField(
                "s",
                T.StructType([T.StructField("x:y", T.ArrayType(T.DecimalType(10, 2)))]),
            ),
            T.StructField("m", T.MapType(T.StringType(), T.TimestampType())),
        ]
    )
    sql = tables.create_statement(
        "/lake/it's", schema, {"k": "it's \\ here"}, partition_by=("a `b` c",)
    )
    assert sql == (
        "CREATE TABLE IF NOT EXISTS delta.`/lake/it's` (`a ``b`` c` string, `n` bigint NOT NULL, "
        "`s` struct<`x:y`:array<decimal(10,2)>>, `m` map<string, timestamp>) USING delta "
        "PARTITIONED BY (`a ``b`` c`) TBLPROPERTIES ('k' = 'it\\'s \\\\ here')"
    )


def test_a_gold_schema_is_known_for_the_job_as_it_is_and_old_ones_are_let_go(tmp_path):
    cfg = TidemarkConfig.from_env({"TIDEMARK_JARS_CACHE": str(tmp_path / "ivy")})
    spec = registry()["events_by_type"]
    assert tables.known_gold_schema(cfg, spec) is None
    folder = tmp_path / "checks" / "gold-schema"
    folder.mkdir(parents=True)
    stale, recent = folder / "events_by_type-old.json", folder / "events_by_type-new.json"
    for path, age in ((stale, tables.GOLD_SCHEMAS_KEPT_SECONDS + 60), (recent, 60)):
        path.write_text("{}")
        os.utime(path, (time.time() - age, time.time() - age))
    schema = T.StructType([T.StructField("event_type", T.StringType())])
    tables.remember_gold_schema(cfg, spec, schema)
    assert tables.known_gold_schema(cfg, spec) == schema
    assert not stale.exists() and recent.exists()
    # another job's absent tables, with no schema of its own known: Spark is needed here
    assert tables.creation_statements(cfg, ["gold/user_sessions"]) is None


def test_a_cache_that_cannot_be_written_does_not_stop_a_job(tmp_path):
    cache = tmp_path / "ivy"
    (tmp_path / "checks").write_text("a file where the folder would be")
    cfg = TidemarkConfig.from_env({"TIDEMARK_JARS_CACHE": str(cache)})
    spec = registry()["events_by_type"]
    tables.remember_gold_schema(cfg, spec, T.StructType([T.StructField("a", T.StringType())]))
    assert tables.known_gold_schema(cfg, spec) is None
