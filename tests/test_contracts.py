"""Contracts between parts: schemas vs dbt sources, the generator's command line, startup errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from streaming_jobs.generator import main as generator_main
from streaming_jobs.jobs import registry
from streaming_jobs.schemas import STREAMS


def test_dbt_sees_every_stream_with_exactly_its_schema_fields(cfg):
    """dbt's own parse (the manifest Dagster loads) against the declared schemas."""
    from orchestration.project import ensure_manifest

    manifest = json.loads(ensure_manifest(cfg).read_text())
    sources = {s["name"]: s for s in manifest["sources"].values()}
    models = {n["name"]: n for n in manifest["nodes"].values() if n["resource_type"] == "model"}
    for name, schema in STREAMS.items():
        table = sources[f"bronze_{name}"]
        assert list(table["columns"]) == schema.field_names
        assert table["meta"]["dagster"]["asset_key"] == ["bronze", name]
        assert f"stg_{name}" in models and models[f"stg_{name}"]["fqn"][1] == "staging"
    for job in registry():
        assert sources[f"gold_{job}"]["meta"]["dagster"]["asset_key"] == ["gold", job]


def test_generator_command_line_writes_the_files_asked_for(tmp_path, capsys):
    assert generator_main(["--data-root", str(tmp_path), "--events", "300", "--files", "6",
                           "--only", "2:5", "--seed", "4"]) == 0
    written = sorted(p.name for p in (tmp_path / "landing" / "transactions").iterdir())
    assert written == ["part-4-00002.jsonl", "part-4-00003.jsonl", "part-4-00004.jsonl"]
    assert "wrote 3 files" in capsys.readouterr().out


def test_unresolvable_jars_give_one_clear_message(tmp_path):
    env = {**os.environ, "TIDEMARK_JARS_CACHE": str(tmp_path / "ivy"),
           "TIDEMARK_DATA_ROOT": str(tmp_path / "data"),
           "TIDEMARK_EXTRA_PACKAGES": "io.tidemark.missing:no-such-artifact_2.13:0.0.1"}
    tidemark = str(Path(sys.executable).with_name("tidemark"))
    result = subprocess.run([tidemark, "summary"], env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 2
    message = [line for line in result.stderr.splitlines() if line.startswith("tidemark:")]
    assert len(message) == 1
    assert "no-such-artifact_2.13:0.0.1" in message[0] and "Maven Central" in message[0]
    assert "make setup" in message[0]


def test_fresh_run_clears_setup_state_but_never_foreign_data(tmp_path):
    import pytest

    from orchestration.cli import DEMO_MARKER, _reset
    from streaming_jobs.config import TidemarkConfig

    cfg = TidemarkConfig.from_env().with_data_root(tmp_path)
    (tmp_path / "dbt" / "target").mkdir(parents=True)  # what `make setup` leaves behind
    (tmp_path / "dagster_home").mkdir(exist_ok=True)
    _reset(cfg)
    assert not (tmp_path / "dbt").exists() and (tmp_path / "dagster_home").is_dir()
    assert (tmp_path / DEMO_MARKER).exists()

    foreign = tmp_path / "elsewhere"
    (foreign / "lake" / "gold" / "t").mkdir(parents=True)
    with pytest.raises(SystemExit, match="refusing to clear"):
        _reset(cfg.with_data_root(foreign))
    assert (foreign / "lake" / "gold" / "t").is_dir()


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
    assert "transactions: 100 landing lines = 95 bronze rows + 5 quarantined (holds)" in text[1]
    assert any("rides: 7 landing lines = 5 bronze rows + 1 quarantined (DOES NOT HOLD)" in t for t in text)
    assert any("5 x invalid JSON" in t for t in text)
    assert text[-1] == "reconciliation: 14 rows compared, 2 unexplained"
    assert any("reconciled 2026-01-01 02:00:00" in t for t in text)


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


def test_recon_command_reports_an_empty_data_root_plainly(tmp_path):
    env = {**os.environ, "TIDEMARK_DATA_ROOT": str(tmp_path / "data")}
    tidemark = str(Path(sys.executable).with_name("tidemark"))
    result = subprocess.run([tidemark, "recon"], env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.strip().splitlines()
    assert lines[-2:] == ["  no reconciliation has run yet",
                          "reconciliation: 0 rows compared, 0 unexplained"]
