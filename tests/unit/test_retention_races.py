"""Maintenance racing a reconciliation: a dbt table written anew while it is vacuumed."""

from streaming_jobs.config import TidemarkConfig
from streaming_jobs.operations.retention import Maintenance, _dbt_table


def test_a_dbt_table_that_lost_its_log_meanwhile_is_skipped_not_failed(tmp_path):
    cfg = TidemarkConfig.from_env().with_data_root(tmp_path / "root")
    table = tmp_path / "root" / "dbt" / "warehouse" / "recon.db" / "recon_user_sessions"
    table.mkdir(parents=True)
    (table / "part-00000.parquet").write_bytes(b"written before its first commit")
    out = Maintenance()
    # no Spark: the step must not need it when there is no log to vacuum
    _dbt_table(out, "dbt/recon.recon_user_sessions", None, cfg, table)
    assert [(s.target, s.action) for s in out.steps] == [("dbt/recon.recon_user_sessions",
                                                          "skipped")]
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
