"""Maintenance racing other writers: a dbt table written anew while it is vacuumed, a job's
auto compaction committing while it is compacted."""

import pytest

from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.operations.retention import Maintenance, _dbt_table


def test_a_dbt_table_that_lost_its_log_meanwhile_is_skipped_not_failed(tmp_path):
    cfg = TidemarkConfig.from_env().with_data_root(tmp_path / "root")
    table = tmp_path / "root" / "dbt" / "warehouse" / "recon.db" / "recon_user_sessions"
    table.mkdir(parents=True)
    (table / "part-00000.parquet").write_bytes(b"written before its first commit")
    out = Maintenance()
    # no Spark: the step must not need it when there is no log to vacuum
    _dbt_table(out, "dbt/recon.recon_user_sessions", None, cfg, table)
    assert [(s.target, s.action) for s in out.steps] == [
        ("dbt/recon.recon_user_sessions", "skipped")
    ]
    assert out.failed == []
    assert (table / "part-00000.parquet").exists()  # nothing of a table being written is deleted


def test_a_dbt_table_with_a_log_folder_but_no_commit_yet_is_skipped(tmp_path):
    # the first reconciliation creates the table: data files and an empty _delta_log come
    # before the first commit (the soak's maintenance failed on exactly this)
    cfg = TidemarkConfig.from_env().with_data_root(tmp_path / "root")
    table = tmp_path / "root" / "dbt" / "warehouse" / "recon.db" / "recon_failed_txn_velocity"
    (table / "_delta_log").mkdir(parents=True)
    (table / "part-00000.parquet").write_bytes(b"written before its first commit")
    out = Maintenance()
    _dbt_table(out, "dbt/recon.recon_failed_txn_velocity", None, cfg, table)
    assert [(s.action, s.files_before) for s in out.steps] == [("skipped", 1)]
    assert (table / "part-00000.parquet").exists()


def test_a_compaction_that_loses_to_a_concurrent_commit_is_tried_again_then_skipped():
    """The soak's first maintenance run failed: its OPTIMIZE of events_by_type lost to the
    job's own auto compaction (``DELTA_CONCURRENT_DELETE_READ``). A conflict is tried again;
    one that keeps losing is a skipped step naming the conflict; any other error is raised."""
    from streaming_jobs.operations.retention import ConcurrentCompaction, retry_conflicts

    conflict = RuntimeError(
        "[DELTA_CONCURRENT_DELETE_READ.WITH_PARTITION_HINT] Transaction "
        "conflict detected, a concurrent OPTIMIZE deleted data"
    )
    calls = []

    def loses_once():
        calls.append(1)
        if len(calls) == 1:
            raise conflict

    assert retry_conflicts(loses_once, pause=0) == 2 and len(calls) == 2

    def always_loses():
        raise conflict

    with pytest.raises(
        ConcurrentCompaction,
        match="3 attempts each lost to a concurrent "
        r"commit \(DELTA_CONCURRENT_DELETE_READ.WITH_PARTITION_HINT\)",
    ):
        retry_conflicts(always_loses, pause=0)

    def broken():
        raise OSError("No space left on device")

    with pytest.raises(OSError, match="No space left"):
        retry_conflicts(broken, pause=0)
