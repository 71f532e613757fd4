"""The progress listener on a real query: what Spark reports reaches the log, the progress as
Spark's own JSON, and a failed query's exception."""

from __future__ import annotations

import json

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F

from streaming_jobs.runtime.progress import ProgressLog, progress_log


def _lines(tmp_path, files: int, per_file: int):
    folder = tmp_path / "in"
    folder.mkdir()
    for i in range(files):
        (folder / f"{i}.txt").write_text("".join(f"{i}-{n}\n" for n in range(per_file)))
    return folder


def test_each_batch_reaches_the_log_as_sparks_json_with_its_observed_metrics(spark, tmp_path):
    log = progress_log(spark)
    assert isinstance(log, ProgressLog)
    folder = _lines(tmp_path, files=3, per_file=4)
    lines = (
        spark.readStream.option("maxFilesPerTrigger", 1)
        .text(str(folder))
        .observe("seen", F.count(F.lit(1)).alias("rows"), F.max("value").alias("last"))
    )
    query = (
        lines.writeStream.format("noop")
        .queryName("listener_probe")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    run_id = str(query.runId)
    assert log.wait_terminated(run_id, timeout=60)
    rows = log.take(run_id)
    # three files, one per batch, four lines each: counted here, not by Spark
    assert [r["batch_id"] for r in rows] == [0, 1, 2]
    assert [r["num_input_rows"] for r in rows] == [4, 4, 4]
    assert {r["job"] for r in rows} == {"listener_probe"}
    seen = []
    for batch, row in enumerate(rows):
        progress = json.loads(row["progress_json"])
        assert progress["runId"] == run_id and progress["batchId"] == batch
        seen.append(progress["observedMetrics"]["seen"])
    # each batch read one whole file (in an order of Spark's choosing)
    assert sorted(seen, key=lambda m: m["last"]) == [
        {"rows": 4, "last": f"{i}-3"} for i in range(3)
    ]


def test_a_failed_querys_exception_reaches_the_log(spark, tmp_path):
    log = progress_log(spark)
    folder = _lines(tmp_path, files=1, per_file=2)

    def refuse(batch, batch_id):
        raise ValueError("refused by the test")

    query = (
        spark.readStream.text(str(folder))
        .writeStream.foreachBatch(refuse)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(StreamingQueryException):
        query.awaitTermination()
    run_id = str(query.runId)
    assert log.wait_terminated(run_id, timeout=60)
    assert "refused by the test" in log._terminated[run_id]
