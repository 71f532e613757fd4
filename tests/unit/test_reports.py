"""What tidemark reports and writes without running anything: summaries, recon metadata, the
Dagster home, the data root reset."""

from __future__ import annotations

import pytest

def test_fresh_run_clears_setup_state_but_never_foreign_data(tmp_path):
    import pytest

    from orchestration.demo import DEMO_MARKER, reset_demo_root as _reset
    from streaming_jobs.config import TidemarkConfig

    cfg = TidemarkConfig.from_env().with_data_root(tmp_path)
    (tmp_path / "dbt" / "target").mkdir(parents=True)  # what `make setup` leaves behind
    (tmp_path / "dagster_home").mkdir(exist_ok=True)
    (tmp_path / "lake" / "ops" / "alerts" / "_delta_log").mkdir(parents=True)  # empty ops table
    _reset(cfg)
    assert not (tmp_path / "dbt").exists() and (tmp_path / "dagster_home").is_dir()
    assert (tmp_path / DEMO_MARKER).exists()

    foreign = tmp_path / "elsewhere"
    (foreign / "lake" / "gold" / "t").mkdir(parents=True)
    with pytest.raises(SystemExit, match="refusing to clear"):
        _reset(cfg.with_data_root(foreign))
    assert (foreign / "lake" / "gold" / "t").is_dir()
    # ops history with rows is data too
    history = tmp_path / "history"
    (history / "lake" / "ops" / "alerts").mkdir(parents=True)
    (history / "lake" / "ops" / "alerts" / "part-0.parquet").write_bytes(b"rows")
    with pytest.raises(SystemExit, match="refusing to clear"):
        _reset(cfg.with_data_root(history))


def test_summary_reports_accounting_classes_and_the_closing_line(tmp_path):
    from orchestration.summary import Summary, render
    from streaming_jobs.config import TidemarkConfig

    recon_row = {"rows_compared": 10, "unexplained_rows": 2, "match_rows": 5, "window_open_rows": 2,
                 "late_dropped_rows": 1, "value_mismatch_rows": 1, "missing_in_stream_rows": 1,
                 "missing_in_batch_rows": 0, "late_events_replayed": 3, "late_events_reported": 3,
                 "stream_watermark": "2026-01-01 01:00:00",
                 "reconciled_at": "2026-01-01 02:00:00"}
    summary = Summary(landing_lines={"transactions": 100, "rides": 7},
                      bronze_rows={"transactions": 95, "rides": 5},
                      quarantine_rows={"transactions": 5, "rides": 1},
                      quarantine_reasons={"transactions": {"invalid JSON": 5}},
                      gold_rows={"failed_txn_velocity": 12},
                      recon={"failed_txn_velocity": recon_row, "zone_revenue_hourly": {
                          **recon_row, "rows_compared": 4, "unexplained_rows": 0}})
    text = render(summary, TidemarkConfig.from_env().with_data_root(tmp_path)).splitlines()
    assert text[1] == ("  transactions: 100 landing lines = 95 bronze + 5 quarantined (holds): "
                       "invalid JSON 5")
    assert text[2] == "  rides: 7 landing lines = 5 bronze + 1 quarantined (DOES NOT HOLD)"
    assert text[3] == "  gold rows: failed_txn_velocity 12"
    # a header, then a line per job: compared, then each class in order, then the late events
    assert text[4].split() == ["recon", "compared", "match", "window_open", "late_dropped",
                               "value_mismatch", "missing_in_stream", "missing_in_batch", "late",
                               "events", "replayed/reported"]
    assert text[5].split() == ["failed_txn_velocity", "10", "5", "2", "1", "1", "1", "0", "3/3"]
    assert text[6].split()[:2] == ["zone_revenue_hourly", "4"]
    assert text[-2] == "  reconciled 2026-01-01 02:00:00"
    assert text[-1] == "reconciliation: 14 rows compared, 2 unexplained"
    assert len(text) == 9  # a screenful, whatever the number of quarantine reasons

    # rows from landing files retention has deleted since are counted apart
    summary.removed_lines = {"rides": 2}
    text = render(summary, TidemarkConfig.from_env().with_data_root(tmp_path)).splitlines()
    assert text[2] == ("  rides: 7 landing lines + 2 in files retention removed = 5 bronze + "
                       "1 quarantined (DOES NOT HOLD)")
    summary.landing_lines["rides"] = 4
    text = render(summary, TidemarkConfig.from_env().with_data_root(tmp_path)).splitlines()
    assert text[2] == ("  rides: 4 landing lines + 2 in files retention removed = 5 bronze + "
                       "1 quarantined (holds)")


def test_recon_metadata_gives_numbers_to_plot_and_a_table():
    from orchestration.recon_report import recon_metadata

    counts = {"match": 6, "window_open": 2, "late_dropped": 1, "value_mismatch": 1,
              "missing_in_stream": 0, "missing_in_batch": 0}
    meta = recon_metadata(counts)
    assert meta["rows_compared"].value == 10 and meta["unexplained_rows"].value == 1
    assert meta["late_dropped_rows"].value == 1 and meta["missing_in_batch_rows"].value == 0
    table = meta["recon_classes"].value.splitlines()
    assert "| match | 6 | 60.0% | yes |" in table
    assert "| value_mismatch | 1 | 10.0% | no |" in table


def test_dagster_home_is_prepared_with_a_valid_dagster_yaml(tmp_path, monkeypatch):
    from dagster import DagsterInstance

    from orchestration.instance import prepare_dagster_home
    from streaming_jobs.config import TidemarkConfig

    home = prepare_dagster_home(TidemarkConfig.from_env().with_data_root(tmp_path))
    assert home == str(tmp_path / "dagster_home")
    instance = DagsterInstance.get()  # reads DAGSTER_HOME/dagster.yaml; raises if invalid
    try:
        queue = instance.get_concurrency_config().run_queue_config
        # several runs at once; one per checkpoint (every query: written out by hand here) and
        # one reconciliation
        assert queue.max_concurrent_runs == 8
        queries = {"bronze_transactions", "bronze_rides", "bronze_orders", "bronze_payments",
                   "bronze_clicks", "failed_txn_velocity", "zone_revenue_hourly",
                   "user_sessions", "user_activity_profile", "order_payment_match",
                   "events_by_type"}
        assert sorted((l["key"], l["limit"]) for l in queue.tag_concurrency_limits) == sorted(
            [("tidemark/reconciliation", 1)] + [(f"tidemark/checkpoint.{q}", 1) for q in queries])
        assert instance.run_monitoring_enabled
    finally:
        instance.dispose()
    # tidemark's file is rewritten at every start; once its header is removed, it is left alone
    config = tmp_path / "dagster_home" / "dagster.yaml"
    config.write_text("telemetry:\n  enabled: false\n")
    prepare_dagster_home(TidemarkConfig.from_env().with_data_root(tmp_path))
    assert config.read_text() == "telemetry:\n  enabled: false\n"


def test_the_overview_reads_a_recon_summary_being_created_as_no_reconciliation_yet(tmp_path):
    """The first reconciliation creates recon_summary: for a moment its log has no commit, and
    ops_overview_sensor's tick must not fail on it (seen as a sensor error in a CI run)."""
    from deltalake import write_deltalake
    import pyarrow as pa

    from orchestration.overview import recon_summaries
    from streaming_jobs.config import TidemarkConfig

    cfg = TidemarkConfig.from_env().with_data_root(tmp_path)
    path = cfg.paths.dbt_table("recon", "recon_summary")
    (path / "_delta_log").mkdir(parents=True)
    assert recon_summaries(cfg) == {}

    rows = [{"job": "a", "reconciled_at": 1, "rows_compared": 5, "unexplained_rows": 0},
            {"job": "a", "reconciled_at": 2, "rows_compared": 7, "unexplained_rows": 1}]
    write_deltalake(str(path), pa.Table.from_pylist(rows))
    assert recon_summaries(cfg) == {"a": rows[1]}
