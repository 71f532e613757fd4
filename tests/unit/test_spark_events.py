"""tools/spark_events.py: Spark's event log read back per job, query and batch."""

from __future__ import annotations

import json

import pytest
import spark_events

QUERY = "bfd78309-0dd0-44a8-9a70-b45f7bf1721c"


def _job(job_id, at_ms, stages, *, batch=None, description="", query=QUERY):
    props = {"spark.job.description": description}
    if batch is not None:
        props |= {"sql.streaming.queryId": query, "streaming.sql.batchId": str(batch)}
    return {
        "Event": "SparkListenerJobStart",
        "Job ID": job_id,
        "Submission Time": at_ms,
        "Stage IDs": stages,
        "Properties": props,
    }


def _stage(stage_id, run_ms, cpu_ns):
    return {
        "Event": "SparkListenerStageCompleted",
        "Stage Info": {
            "Stage ID": stage_id,
            "Accumulables": [
                {"Name": "internal.metrics.executorRunTime", "Value": run_ms},
                {"Name": "internal.metrics.executorCpuTime", "Value": cpu_ns},
                {"Name": "internal.metrics.resultSize", "Value": 99},
            ],
        },
    }


def _end(job_id, at_ms):
    return {"Event": "SparkListenerJobEnd", "Job ID": job_id, "Completion Time": at_ms}


def _write(folder, name, events):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("".join(json.dumps(e) + "\n" for e in events))


def test_a_batchs_jobs_are_summed_from_their_stages_across_rolled_files(tmp_path):
    app = tmp_path / "eventlog_v2_local-1"
    _write(
        app,
        "events_1_local-1",
        [
            {"Event": "SparkListenerApplicationStart", "Timestamp": 100_000},
            _job(0, 109_000, [0, 1], batch=5, description="user_activity_profile\nid = x"),
            _stage(0, 6_000, 1_000_000_000),
            _stage(1, 2_500, 500_000_000),
            _end(0, 115_000),
            _job(1, 110_000, [2], batch=4, description="bronze_clicks\nid = y", query="other"),
        ],
    )
    _write(
        app,
        "events_2_local-1",
        [
            _stage(2, 700, 300_000_000),
            _end(1, 111_000),
            # stage 4 was skipped (its output reused): it never completes and adds nothing
            _job(2, 118_000, [3, 4], batch=5, description="Delta: user_activity_profile\nid"),
            _stage(3, 1_200, 400_000_000),
            _end(2, 119_500),
            _job(3, 120_000, [5], description="Listing leaf files"),  # no query: no batch
        ],
    )
    (app / "appstatus_local-1.inprogress").write_text("")

    log = spark_events.read(app)

    assert log.app_start == 100.0
    assert [j.job_id for j in log.jobs] == [0, 1, 2, 3]
    first = log.jobs[0]
    assert (first.query_id, first.batch_id, first.description) == (
        QUERY,
        5,
        "user_activity_profile",
    )
    assert (first.seconds, first.task_seconds, first.cpu_seconds) == (6.0, 8.5, 1.5)
    assert log.jobs[3].seconds is None and log.jobs[3].batch_id is None
    assert log.query_names({"user_activity_profile", "bronze_clicks"}) == {
        QUERY: "user_activity_profile",
        "other": "bronze_clicks",
    }
    assert spark_events.batch_summary(log, QUERY, 5, since=100.0) == {
        "spark_jobs": 2,
        "first_job_s": 9.0,
        "last_job_end_s": 19.5,
        "tasks_s": 9.7,  # 6.0 + 2.5 + 1.2
        "cpu_s": 1.9,  # 1.0 + 0.5 + 0.4
    }
    assert spark_events.batch_summary(log, QUERY, 6, since=100.0) == {"spark_jobs": 0}


def test_a_compressed_log_is_refused_with_what_to_set(tmp_path):
    app = tmp_path / "eventlog_v2_local-2"
    app.mkdir()
    (app / "events_1_local-2.zstd").write_bytes(b"\x28\xb5\x2f\xfd")
    with pytest.raises(ValueError, match="spark.eventLog.compress=false"):
        spark_events.read(app)
    with pytest.raises(FileNotFoundError, match="no events_"):
        spark_events.read(tmp_path)  # the folder above the log
