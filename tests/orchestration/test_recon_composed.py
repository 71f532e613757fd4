"""Composed reconciliation (dbt's macros/compose.sql) on hand-made clicks, with real streams,
Delta tables and dbt: a session that spans two days, a profile that a late click reaches back
before, a click that bridges two sessions, a copy of a click already held, a new user.

The incremental run composes user_sessions from the sessions that end on the new clicks' day
or later, and user_activity_profile from each touched user's kept profile (the user whose
kept profile a click reaches before is recomputed from all their clicks). Its rows are checked
against values worked out by hand, and against a backfill, row for row.
"""

from __future__ import annotations

import datetime as dt

import pytest

from helpers import click, dbt, land, scopes, table_rows
from orchestration.recon.recon_scope import read_positions
from streaming_jobs.storage.lake import read_table
from streaming_jobs.storage.registry import get_job
from streaming_jobs.runtime.runner import run_bronze, run_job

BUILD = ("build", "--exclude-resource-type", "unit_test")
CLICK_JOBS = ("events_by_type", "user_sessions", "user_activity_profile")
DAY = 24 * 60  # minutes
T0 = dt.datetime(2026, 1, 1)


def at(minute: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minute)


def staging_test_sql(cfg) -> str:
    """The SQL the last dbt run ran for the not_null test of bronze clicks."""
    [path] = (cfg.paths.dbt / "target" / "run").rglob("stg_clicks__not_null.sql")
    return path.read_text()


def stream(spark, cfg, name: str, events: list[dict]) -> None:
    land(cfg, name, events, stream="clicks")
    run_bronze(spark, cfg, "clicks")
    for job in CLICK_JOBS:
        run_job(spark, cfg, get_job(job))


@pytest.mark.slow
@pytest.mark.long  # CI's budget: test_dagster's backfill covers composed jobs there
def test_composed_sessions_and_profiles_equal_a_backfill(spark, cfg):
    # wave 1. u1: a click every 4 minutes from 00:00 on day 1 to 06:00 on day 2 (one session,
    # one profile, 451 clicks). u2: two clicks on day 2. u3: two clicks 90 minutes apart (its
    # profile is the second). u5: two clicks 10 minutes apart (two sessions).
    first = [click(f"a{i}", "u1", i * 4, amount=1.25) for i in range(451)]
    first += [click("b1", "u2", DAY + 400), click("b2", "u2", DAY + 410, amount=2.5)]
    first += [click("c1", "u3", DAY + 300), click("c2", "u3", DAY + 390)]
    first += [click("e1", "u5", DAY + 500), click("e2", "u5", DAY + 510)]
    stream(spark, cfg, "clicks-1.jsonl", first)
    full = dbt(*BUILD)
    assert full.returncode == 0, full.stdout[-3000:] + full.stderr[-3000:]
    # every row of bronze clicks is tested in a full run
    assert "bronze_version >" not in staging_test_sql(cfg)
    wave_1 = {r["version_to"] for r in read_positions(cfg) if r["source"] == "clicks"}
    assert len(wave_1) == 1, wave_1  # every job read bronze clicks up to the same version

    # wave 2, all on day 2: u1's session goes on; u2 gets a click 15 minutes before its
    # profile began (within the TTL: recomputed from all its clicks); u3 one 20 minutes before
    # its second click (its profile now starts there); u5 a click that bridges its two
    # sessions; a copy of u1's click a450 (held already); a new user u6; u9 far ahead. The
    # stream's watermark is 10 minutes behind wave 1's last click (day 2, 08:30): the clicks
    # before it are late, in the truth (basis all) only; e3, f1 and z2 are on time.
    second = [click("a451", "u1", 451 * 4, amount=1.25), click("a452", "u1", 452 * 4)]
    second += [click("b0", "u2", DAY + 385, amount=4.0), click("c3", "u3", DAY + 370)]
    second += [click("e3", "u5", DAY + 505), click("a450", "u1", 450 * 4, amount=1.25)]
    second += [click("f1", "u6", DAY + 600), click("z2", "u9", DAY + 900)]
    stream(spark, cfg, "clicks-2.jsonl", second)
    incremental = dbt(*BUILD)
    assert incremental.returncode == 0, incremental.stdout[-3000:] + incremental.stderr[-3000:]
    said = scopes(incremental.stderr)
    # the staging tests read the clicks past the recorded position only: wave 2's rows
    assert f"bronze_version > {wave_1.pop()} and ingest_batch_id >=" in staging_test_sql(cfg)
    # the new clicks are all on day 2: neither job reads day 1 again
    assert said["user_sessions"] == "from 2026-01-02", said
    assert said["user_activity_profile"] == "from 2026-01-02", said

    sessions = {
        (r.user_id, r.window_start): r
        for r in read_table(spark, cfg.paths.dbt_table("batch", "int_user_sessions__batch"))
        .where("basis = 'all'")
        .collect()
    }
    # u1: one session from day 1 00:00 to its last click + 5 minutes, 453 distinct clicks
    u1 = sessions[("u1", at(0))]
    assert (u1.clicks, u1.window_end, u1.spend) == (453, at(452 * 4 + 5), 452 * 1.25)
    assert u1.recon_date == dt.date(2026, 1, 2)  # the day it ends
    # u5: the bridging click makes one session of three clicks
    assert [(s.window_start, s.clicks) for k, s in sessions.items() if k[0] == "u5"] == [
        (at(DAY + 500), 3)
    ]

    profiles = {
        (r.basis, r.user_id): r
        for r in read_table(
            spark, cfg.paths.dbt_table("batch", "int_user_activity_profile__batch")
        ).collect()
    }
    expected = {
        "u1": (453, at(0), at(452 * 4)),
        "u2": (3, at(DAY + 385), at(DAY + 410)),
        "u3": (2, at(DAY + 370), at(DAY + 390)),
        "u5": (3, at(DAY + 500), at(DAY + 510)),
        "u6": (1, at(DAY + 600), at(DAY + 600)),
        "u9": (1, at(DAY + 900), at(DAY + 900)),
    }
    assert {
        u: (p.visits, p.first_activity, p.last_activity)
        for (basis, u), p in profiles.items()
        if basis == "all"
    } == expected
    assert profiles[("all", "u2")].total_spend == 6.5
    # what the stream counted: u5's bridging click was on time, u2's was late
    on_time = {u: p.visits for (basis, u), p in profiles.items() if basis == "on_time"}
    assert on_time == {"u1": 451, "u2": 2, "u3": 1, "u5": 3, "u6": 1, "u9": 1}
    on_time_u5 = (
        read_table(spark, cfg.paths.dbt_table("batch", "int_user_sessions__batch"))
        .where("basis = 'on_time' and user_id = 'u5'")
        .collect()
    )
    assert [(s.window_start, s.clicks) for s in on_time_u5] == [(at(DAY + 500), 3)]

    tables = [
        ("batch", "int_user_sessions__batch"),
        ("batch", "int_user_activity_profile__batch"),
        ("recon", "recon_user_sessions"),
        ("recon", "recon_user_activity_profile"),
    ]
    composed = {t: table_rows(cfg, *t) for t in tables}
    # a backfill of these four tables (the rest of the project is as the incremental run left it)
    backfill = dbt("--full", *BUILD, "--select", *(name for _, name in tables))
    assert backfill.returncode == 0, backfill.stdout[-3000:] + backfill.stderr[-3000:]
    for table in tables:
        assert table_rows(cfg, *table) == composed[table], f"{table}: composed rows differ"
