"""What a reconciliation run's Dagster partitions make it recompute
(`orchestration.recon.recon_partitions`); the dbt runs themselves are in test_dagster and
test_recon_incremental."""

import datetime as dt

import pytest

from orchestration.recon.recon_partitions import (
    chosen_tags,
    MAX_LABELLED_DAYS,
    incremental_tags,
    labelled_days,
    partitions_def,
    recomputed_from,
    run_scope,
)
from orchestration.recon.recon_scope import NOTHING_NEW
from streaming_jobs.core.config import ConfigError, TidemarkConfig

FIRST = "2026-01-01"


def test_the_mode_tag_wins_then_the_range_decides():
    # tidemark/recon=full: everything, whatever the range
    assert run_scope("full", "2026-03-05", FIRST) == (True, None)
    # incremental (schedule, automation, live): only what new events change
    assert run_scope("incremental", "2026-03-05", FIRST) == (False, None)
    # chosen by hand: from the range's first day at least
    assert run_scope(None, "2026-03-05", FIRST) == (False, "2026-03-05")
    # a range from the first partition is a backfill of everything: the full run
    assert run_scope(None, FIRST, FIRST) == (True, None)


def test_partitions_are_utc_days_from_the_configured_start_to_today(monkeypatch):
    monkeypatch.setenv("TIDEMARK_RECON_START_DATE", "2026-02-03")
    cfg = TidemarkConfig.from_env()
    daily = partitions_def(cfg)
    today = dt.datetime.now(dt.timezone.utc).date()
    assert daily.get_first_partition_key() == "2026-02-03"
    assert daily.get_last_partition_key() == today.isoformat()
    assert incremental_tags(cfg) == {
        "tidemark/recon": "incremental",
        "dagster/partition": today.isoformat(),
    }


def test_a_malformed_or_future_start_date_names_the_variable(monkeypatch):
    monkeypatch.setenv("TIDEMARK_RECON_START_DATE", "2026/02/03")
    with pytest.raises(ConfigError, match="TIDEMARK_RECON_START_DATE='2026/02/03'"):
        TidemarkConfig.from_env()
    tomorrow = dt.datetime.now(dt.timezone.utc).date() + dt.timedelta(days=2)
    monkeypatch.setenv("TIDEMARK_RECON_START_DATE", tomorrow.isoformat())
    with pytest.raises(ConfigError, match="after today"):
        incremental_tags(TidemarkConfig.from_env())


def test_chosen_partitions_are_one_day_or_a_range():
    assert chosen_tags("2026-03-05") == {"dagster/partition": "2026-03-05"}
    assert chosen_tags("2026-03-05:2026-03-05") == {"dagster/partition": "2026-03-05"}
    assert chosen_tags("2026-03-05:2026-03-09") == {
        "dagster/asset_partition_range_start": "2026-03-05",
        "dagster/asset_partition_range_end": "2026-03-09",
    }


def test_what_a_recon_materialization_says_it_recomputed():
    variables = {"recon_from": {"a": "2026-03-05", "b": None, "c": NOTHING_NEW}}
    assert recomputed_from(variables, "a") == "2026-03-05"
    assert recomputed_from(variables, "b") == "all"
    assert recomputed_from(variables, "c") == "none"
    assert recomputed_from({}, "a") == "all"  # no scope computed: dbt recomputed everything


def test_a_run_labels_the_days_of_data_it_rewrote_and_no_other():
    import dagster as dg

    daily = dg.DailyPartitionsDefinition(start_date="2026-01-01", timezone="UTC", end_offset=1)
    today = daily.get_last_partition_key()
    held = {"2025-12-31", "2026-01-01", "2026-01-02", "2026-01-05", today, "2099-01-01"}
    # recomputed from 2026-01-02: the days before are the last run's; the run's own partition
    # (today), a day before the first partition and a day after today are not labelled
    assert labelled_days(held, "2026-01-02", {today}, daily) == (["2026-01-02", "2026-01-05"], 0)
    assert labelled_days(held, "all", {today}, daily) == (
        ["2026-01-01", "2026-01-02", "2026-01-05"],
        0,
    )
    assert labelled_days(held, "none", {today}, daily) == ([], 0)
    # more days than a run labels: the newest are, and the rest are counted
    years = dg.DailyPartitionsDefinition(start_date="2024-01-01", timezone="UTC", end_offset=1)
    every = set(years.get_partition_keys())
    days, left = labelled_days(every, "all", set(), years)
    assert len(days) == MAX_LABELLED_DAYS and days == sorted(every)[-MAX_LABELLED_DAYS:]
    assert left == len(every) - MAX_LABELLED_DAYS > 0
