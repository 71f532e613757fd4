"""What tidemark reports and writes without running anything: summaries, recon metadata, the
Dagster home, the data root reset."""

from __future__ import annotations

import pytest


def test_fresh_run_clears_setup_state_but_never_foreign_data(tmp_path):
    from orchestration.cli.demo import DEMO_MARKER, reset_demo_root as _reset
    from streaming_jobs.core.config import TidemarkConfig

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


def _recon_row(job: str, compared: int, unexplained: int, status: str = "passed", **extra):
    from datetime import datetime, timezone

    classes = {
        "match": compared - unexplained,
        "window_open": 0,
        "late_dropped": 0,
        "value_mismatch": unexplained,
        "missing_in_stream": 0,
        "missing_in_batch": 0,
    }
    return {
        "run_key": "r1",
        "job": job,
        "finished_at": datetime(2026, 1, 1, 2, tzinfo=timezone.utc),
        "run_status": "passed" if status == "passed" else "failed",
        "status": status,
        "rows_compared": compared,
        "unexplained_rows": unexplained,
        "class_rows": classes,
        "failed_checks": [],
        "late_events_replayed": 3,
        "late_events_reported": 3,
        "late_events_report_lost": None,
        "message": None,
        **extra,
    }


def test_summary_reports_accounting_classes_and_the_closing_line(tmp_path):
    from orchestration.recon.recon_runs import ReconStatus
    from orchestration.cli.summary import Summary, render
    from streaming_jobs.core.config import TidemarkConfig

    rows = [_recon_row("failed_txn_velocity", 10, 0), _recon_row("zone_revenue_hourly", 4, 0)]
    summary = Summary(
        landing_lines={"transactions": 100, "rides": 7},
        bronze_rows={"transactions": 95, "rides": 5},
        quarantine_rows={"transactions": 5, "rides": 1},
        quarantine_reasons={"transactions": {"invalid JSON": 5}},
        gold_rows={"failed_txn_velocity": 12},
        recon=ReconStatus(jobs={r["job"]: r for r in rows}, latest_run=rows),
    )
    text = render(summary, TidemarkConfig.from_env().with_data_root(tmp_path)).splitlines()
    assert text[1] == (
        "  transactions: 100 landing lines = 95 bronze + 5 quarantined (holds): invalid JSON 5"
    )
    assert text[2] == "  rides: 7 landing lines = 5 bronze + 1 quarantined (DOES NOT HOLD)"
    assert text[3] == "  gold rows: failed_txn_velocity 12"
    # a header, then a line per job: status, compared, each class in order, the late events
    assert text[4].split() == [
        "recon",
        "status",
        "compared",
        "match",
        "window_open",
        "late_dropped",
        "value_mismatch",
        "missing_in_stream",
        "missing_in_batch",
        "late",
        "events",
        "replayed/reported",
    ]
    assert text[5].split() == [
        "failed_txn_velocity",
        "passed",
        "10",
        "10",
        "0",
        "0",
        "0",
        "0",
        "0",
        "3/3",
    ]
    assert text[6].split()[:3] == ["zone_revenue_hourly", "passed", "4"]
    assert text[-2] == "  latest run 2026-01-01 02:00:00 UTC: passed"
    assert text[-1] == "reconciliation: 14 rows compared, 0 unexplained"
    assert len(text) == 9  # a screenful, whatever the number of quarantine reasons
    assert summary.recon.clean

    # rows from landing files retention has deleted since are counted apart
    summary.removed_lines = {"rides": 2}
    text = render(summary, TidemarkConfig.from_env().with_data_root(tmp_path)).splitlines()
    assert text[2] == (
        "  rides: 7 landing lines + 2 in files retention removed = 5 bronze + "
        "1 quarantined (DOES NOT HOLD)"
    )
    summary.landing_lines["rides"] = 4
    text = render(summary, TidemarkConfig.from_env().with_data_root(tmp_path)).splitlines()
    assert text[2] == (
        "  rides: 4 landing lines + 2 in files retention removed = 5 bronze + 1 quarantined (holds)"
    )

    # a job whose gold table does not exist yet is said so, not counted as 0 rows
    summary.gold_rows = {"failed_txn_velocity": 0, "user_sessions": None}
    text = render(summary, TidemarkConfig.from_env().with_data_root(tmp_path)).splitlines()
    assert text[3] == "  gold rows: failed_txn_velocity 0, user_sessions no table yet"


def test_recon_metadata_gives_numbers_to_plot_and_a_table():
    from orchestration.recon.recon_report import recon_metadata

    counts = {
        "match": 6,
        "window_open": 2,
        "late_dropped": 1,
        "value_mismatch": 1,
        "missing_in_stream": 0,
        "missing_in_batch": 0,
    }
    meta = recon_metadata(counts)
    assert meta["rows_compared"].value == 10 and meta["unexplained_rows"].value == 1
    assert meta["late_dropped_rows"].value == 1 and meta["missing_in_batch_rows"].value == 0
    table = meta["recon_classes"].value.splitlines()
    assert "| match | 6 | 60.0% | yes |" in table
    assert "| value_mismatch | 1 | 10.0% | no |" in table


def test_dagster_home_is_prepared_with_a_valid_dagster_yaml(tmp_path, monkeypatch):
    from dagster import DagsterInstance

    from orchestration.lib.instance import prepare_dagster_home
    from streaming_jobs.core.config import TidemarkConfig

    home = prepare_dagster_home(TidemarkConfig.from_env().with_data_root(tmp_path))
    assert home == str(tmp_path / "dagster_home")
    instance = DagsterInstance.get()  # reads DAGSTER_HOME/dagster.yaml; raises if invalid
    try:
        queue = instance.get_concurrency_config().run_queue_config
        # several runs at once; one per checkpoint (every query: written out by hand here) and
        # one reconciliation
        assert queue.max_concurrent_runs == 8
        queries = {
            "bronze_transactions",
            "bronze_rides",
            "bronze_orders",
            "bronze_payments",
            "bronze_clicks",
            "failed_txn_velocity",
            "zone_revenue_hourly",
            "user_sessions",
            "user_activity_profile",
            "order_payment_match",
            "events_by_type",
        }
        assert sorted((l["key"], l["limit"]) for l in queue.tag_concurrency_limits) == sorted(
            [("tidemark/reconciliation", 1)]
            + [(f".dagster/tidemark/checkpoint.{q}", 1) for q in queries]
        )
        assert instance.run_monitoring_enabled
        assert instance.run_coordinator.dequeue_interval_seconds == 1  # not Dagster's 5
    finally:
        instance.dispose()
    # tidemark's file is rewritten at every start; once its header is removed, it is left alone
    config = tmp_path / "dagster_home" / "dagster.yaml"
    config.write_text("telemetry:\n  enabled: false\n")
    prepare_dagster_home(TidemarkConfig.from_env().with_data_root(tmp_path))
    assert config.read_text() == "telemetry:\n  enabled: false\n"


def test_a_failed_or_unbuilt_reconciliation_is_never_read_as_clean(tmp_path):
    """The run's rows as tidemark-dbt records them (a real ops table): the status, the summary's
    closing line, the overview and the recon_summary asset's metadata all say failed, naming the
    job and its unexplained count; a job not reconciled, or a run that failed before any job, is
    never summed as 0 unexplained rows."""
    from streaming_jobs.storage import ops_tables
    from streaming_jobs.core.config import TidemarkConfig

    from orchestration.recon import recon_runs
    from orchestration.lib.overview import overview
    from orchestration.cli.summary import recon_lines
    from orchestration.recon.recon_report import run_metadata

    from datetime import timedelta

    cfg = TidemarkConfig.from_env().with_data_root(tmp_path)
    status = recon_runs.status(cfg)
    assert not status.ran and not status.clean
    assert recon_lines(status)[-2:] == [
        "  no reconciliation has run yet",
        "reconciliation: none has run yet (run `tidemark run`, or the reconciliation job in "
        "Dagster)",
    ]
    table, totals = overview(cfg)
    assert "unexplained_rows" not in totals and "rows_compared" not in totals

    failed = _recon_row(
        "failed_txn_velocity",
        30,
        10,
        status="failed",
        failed_checks=["no_unexplained_rows__failed_txn_velocity: 10 rows"],
    )
    unbuilt = {
        **_recon_row("events_by_type", 0, 0, status="not_built"),
        "rows_compared": None,
        "unexplained_rows": None,
        "class_rows": None,
        "late_events_replayed": None,
        "run_status": "failed",
        "message": "recon_events_by_type skipped: an upstream "
        "node failed: int_events_by_type__batch (error)",
    }
    failed["run_status"] = "failed"
    ops_tables.append(cfg, "recon_runs", [failed, unbuilt])
    status = recon_runs.status(cfg)
    # events_by_type was not reconciled: its rows are not counted, so the total is not known
    assert status.ran and not status.clean and status.unexplained is None
    assert status.counted_unexplained == 10 and status.uncounted == ["events_by_type"]
    assert status.jobs["failed_txn_velocity"]["class_rows"]["value_mismatch"] == 10
    lines = recon_lines(status)
    assert lines[-1].startswith(
        "reconciliation FAILED: 2 problem(s), unexplained rows not known (not counted: "
        "events_by_type; 10 in the jobs counted) in 30 compared: "
    )
    assert (
        "failed_txn_velocity: 10 unexplained rows (failed checks: "
        "no_unexplained_rows__failed_txn_velocity: 10 rows)"
    ) in lines[-1]
    assert "events_by_type: not reconciled" in lines[-1]
    assert next(line for line in lines if line.split()[:1] == ["events_by_type"]).split()[1:4] == [
        "not_built",
        "-",
        "-",
    ]

    table, totals = overview(cfg)
    assert "unexplained_rows" not in totals and totals["reconciliation_failed_jobs"] == 2
    row = next(line for line in table.splitlines() if line.startswith("| failed_txn_velocity "))
    assert "**FAILED** (failed)" in row and row.split("|")[8].strip() == "10"
    meta = run_metadata(status)
    assert "unexplained_rows" not in meta and meta["jobs_failed"].value == 2
    assert meta["unexplained_rows_not_counted"].value == "events_by_type"
    assert meta["reconciliation"].value.startswith("FAILED: ")

    # the same jobs reconciled again, failed_txn_velocity with 2 unexplained rows: counted
    again = [
        {**_recon_row(job, 6, n, status="failed" if n else "passed"), "run_key": "r2"}
        for job, n in (("failed_txn_velocity", 2), ("events_by_type", 0))
    ]
    for row in again:
        row.update(run_status="failed", finished_at=failed["finished_at"].replace(hour=3))
    ops_tables.append(cfg, "recon_runs", again)
    status = recon_runs.status(cfg)
    assert status.unexplained == 2 and status.uncounted == []
    assert run_metadata(status)["unexplained_rows"].value == 2
    assert overview(cfg)[1]["unexplained_rows"] == 2
    assert recon_lines(status)[-1].startswith(
        "reconciliation FAILED: 1 problem(s), 2 unexplained rows in 12 compared: "
    )

    # then a run that failed before reconciling any job: each job's count is an earlier run's
    recon_runs.record_error(
        cfg, "r3", failed["finished_at"].replace(hour=4), "dbt could not reach the endpoint"
    )
    status = recon_runs.status(cfg)
    assert status.unexplained is None and status.counted_unexplained == 2
    assert "unexplained_rows" not in run_metadata(status)
    assert "unexplained_rows" not in overview(cfg)[1]
    assert recon_lines(status)[-1].startswith(
        "reconciliation FAILED: 2 problem(s), unexplained rows not known (not counted: the "
        "latest run, which failed before reconciling any job; 2 in the jobs counted) in 12 "
        "compared: "
    )

    # a later clean run of both jobs makes it clean again (the error's row has the time now)
    later = [
        {
            **_recon_row(job, 1500, 0),
            "run_key": "r4",
            "finished_at": status.finished_at + timedelta(seconds=1),
        }
        for job in ("failed_txn_velocity", "events_by_type")
    ]
    ops_tables.append(cfg, "recon_runs", later)
    status = recon_runs.status(cfg)
    assert status.clean and status.unexplained == 0
    assert run_metadata(status)["unexplained_rows"].value == 0
    # the closing line groups thousands, as every count the summary shows
    assert recon_lines(status)[-1] == "reconciliation: 3,000 rows compared, 0 unexplained"


def test_a_failed_job_row_without_counts_is_said_not_counted():
    """A job's row that failed with no class counts (dbt recorded the job, then no table to
    count) names the job and says its rows were not counted, rather than failing to print."""
    from orchestration.recon.recon_runs import ReconStatus

    row = {
        **_recon_row("user_sessions", 0, 0, status="error"),
        "rows_compared": None,
        "unexplained_rows": None,
        "class_rows": None,
        "message": "the recon table could not be read",
    }
    status = ReconStatus(jobs={"user_sessions": row}, latest_run=[row])
    assert status.unexplained is None and status.uncounted == ["user_sessions"]
    assert status.problems() == [
        "user_sessions: unexplained rows not counted (failed checks: no failed check recorded). "
        "the recon table could not be read"
    ]


def test_the_overview_says_none_yet_before_a_watermark_and_plots_no_false_lag(tmp_path):
    from datetime import datetime, timezone

    from streaming_jobs.storage import ops_tables
    from streaming_jobs.core.config import TidemarkConfig

    from orchestration.lib.overview import overview

    cfg = TidemarkConfig.from_env().with_data_root(tmp_path)
    now = datetime(2026, 11, 28, 12, tzinfo=timezone.utc)
    ops_tables.append(
        cfg,
        "stream_progress",
        [
            {
                "job": "failed_txn_velocity",
                "batch_id": 0,
                "ts": now,
                "state_rows": 0,
                "watermark": datetime(1970, 1, 1, tzinfo=timezone.utc),
            }
        ],
    )
    table, totals = overview(cfg, now=now)
    row = next(line for line in table.splitlines() if line.startswith("| failed_txn_velocity "))
    cells = [c.strip() for c in row.split("|")]
    assert cells[3:5] == ["none yet", "-"]  # the watermark, and no lag
    assert "max_watermark_lag_seconds" not in totals and totals["max_batch_age_seconds"] == 0
