"""tidemark rebuild never deletes gold for a job that would fail again on the same rows."""

from __future__ import annotations

from argparse import Namespace
from datetime import datetime, timedelta, timezone

import pytest

from orchestration.cli.operate import OperationError, rebuild as rebuild_command
from streaming_jobs.storage import ops_tables
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.storage.failures import record_failure
from streaming_jobs.operations.rebuild import RebuildRefused, rebuild

JOB = "events_by_type"


def committed(cfg, at: datetime) -> None:
    ops_tables.append(
        cfg,
        "stream_progress",
        [{"job": JOB, "query_id": "q", "run_id": "r", "batch_id": 3, "ts": at}],
    )


def test_a_job_failing_since_its_last_commit_is_not_rebuilt_unless_forced(tmp_path):
    cfg = TidemarkConfig.from_env().with_data_root(tmp_path)
    gold = cfg.paths.table("gold", JOB)
    gold.mkdir(parents=True)
    (gold / "part-0.parquet").write_bytes(b"rows")
    now = datetime.now(timezone.utc)
    committed(cfg, now - timedelta(hours=1))
    assert record_failure(
        cfg,
        JOB,
        "run-1",
        "[TASK_WRITE_FAILED] Task failed while writing rows to lake/gold/events_by_type",
    )
    assert record_failure(cfg, JOB, "run-2", "[TASK_WRITE_FAILED] again")

    with pytest.raises(RebuildRefused) as refused:
        rebuild(cfg, JOB)
    message = str(refused.value)
    assert message.startswith(f"job {JOB} has failed 2 time(s) since its last committed batch")
    assert "[TASK_WRITE_FAILED] again" in message and "--force" in message
    assert (gold / "part-0.parquet").exists()  # nothing removed
    # the command says it and exits 1 (OperationError is printed, exit code 1)
    with pytest.raises(OperationError, match="has failed 2 time"):
        rebuild_command(cfg, Namespace(job=JOB, force=False, from_scratch=True))

    # once the job commits again, the failures are history: a rebuild goes ahead
    committed(cfg, datetime.now(timezone.utc) + timedelta(seconds=1))
    assert rebuild(cfg, JOB)["gold"] is True and not gold.exists()


def test_force_rebuilds_a_failing_job(tmp_path):
    cfg = TidemarkConfig.from_env().with_data_root(tmp_path)
    gold = cfg.paths.table("gold", JOB)
    gold.mkdir(parents=True)
    record_failure(cfg, JOB, "run-1", "boom")  # failed and never committed
    with pytest.raises(RebuildRefused, match="failed 1 time"):
        rebuild(cfg, JOB)
    assert rebuild(cfg, JOB, force=True)["gold"] is True and not gold.exists()
