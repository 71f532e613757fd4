"""A user adds a job as one module in a folder of their own; it runs and becomes an asset."""

from __future__ import annotations

import textwrap
from collections import Counter

import pytest
from dagster import AssetKey

from helpers import land, txn
from streaming_jobs.storage.registry import load_problems, get_job, registry
from streaming_jobs.storage.lake import read_table
from streaming_jobs.runtime.runner import run_bronze, run_job

MODULE = textwrap.dedent('''
    """merchant_failures_10m: FAILED transactions per merchant per 10-minute window.

    Tumbling windows; state bounded by a 5-minute watermark.
    """
    from pyspark.sql import functions as F

    from streaming_jobs.stateful.dedup import dedup_within_watermark
    from streaming_jobs.spec import JobSpec, StateBound


    def build(events, *, window, watermark):
        failed = dedup_within_watermark(events, "event_time", watermark).where("status = 'FAILED'")
        return (failed.groupBy("merchant", F.window("event_time", window).alias("w"))
                .agg(F.count(F.lit(1)).alias("failures"))
                .select("merchant", F.col("w.start").alias("window_start"),
                        F.col("w.end").alias("window_end"), "failures"))


    SPEC = JobSpec(
        name="merchant_failures_10m", description="FAILED transactions per merchant per 10 min",
        source="transactions", keys=("merchant", "window_start", "window_end"),
        measures=("failures",), event_time="event_time", state=StateBound(watermark="5 minutes"),
        output_mode="append", build=build, params={"window": "10 minutes"},
    )
''')


@pytest.fixture
def user_jobs(tmp_path, monkeypatch):
    folder = tmp_path / "my_jobs"
    folder.mkdir()
    (folder / "merchant_failures.py").write_text(MODULE)
    monkeypatch.setenv("TIDEMARK_JOBS_PATH", str(folder))
    return folder


@pytest.mark.long  # CI's budget: the keyed scaffold is a Python module in a user folder too
def test_a_job_module_in_a_user_folder_runs_and_is_an_asset(spark, cfg, user_jobs):
    assert "merchant_failures_10m" in registry()
    spec = get_job("merchant_failures_10m")

    from orchestration.defs.streaming.assets import streaming_assets

    keys = {key for a in streaming_assets() for key in a.keys}
    assert AssetKey(["gold", "merchant_failures_10m"]) in keys

    events = [
        txn("a", "u1", 1),
        txn("b", "u2", 4),
        txn("c", "u3", 12),
        txn("d", "u1", 13, "APPROVED"),
        txn("e", "u1", 40),
    ]
    for e, merchant in zip(events, ["m1", "m1", "m1", "m2", "m2"]):
        e["merchant"] = merchant
    land(cfg, "w.jsonl", events)
    run_bronze(spark, cfg, "transactions")
    run_job(spark, cfg, spec)
    got = {
        (r.merchant, r.window_start.minute): r.failures
        for r in read_table(spark, cfg.paths.table("gold", spec.name)).collect()
    }
    # watermark 40 - 5 = 35: windows [0,10) and [10,20) are final; [40,50) is still open
    expected = Counter(
        (e["merchant"], int(e["event_time"][14:16]) // 10 * 10)
        for e in events
        if e["status"] == "FAILED" and int(e["event_time"][14:16]) < 30
    )
    assert got == dict(expected)


def test_a_broken_job_module_is_named_and_left_out(tmp_path, monkeypatch):
    folder = tmp_path / "bad_jobs"
    folder.mkdir()
    (folder / "oops.py").write_text("import no_such_module_anywhere\n")
    monkeypatch.setenv("TIDEMARK_JOBS_PATH", str(folder))
    [problem] = load_problems()
    assert problem.file == str(folder / "oops.py") and problem.subject == "oops"
    assert "No module named 'no_such_module_anywhere'" in problem.message
    assert "failed_txn_velocity" in registry()  # the others load


def test_a_job_without_dbt_models_streams_but_is_left_out_of_reconciliation(user_jobs):
    from orchestration.recon.dbt_models import reconciled_jobs
    from orchestration.recon.dbt_vars import job_vars

    reconciled = job_vars(reconciled_jobs())
    assert "merchant_failures_10m" not in reconciled
    assert set(reconciled) == {
        "failed_txn_velocity",
        "zone_revenue_hourly",
        "user_sessions",
        "user_activity_profile",
        "order_payment_match",
        "events_by_type",
    }
    assert reconciled["zone_revenue_hourly"]["keys"] == [
        "pickup_zone",
        "window_start",
        "window_end",
    ]
    assert reconciled["failed_txn_velocity"]["window_seconds"] == 86_400


LOGINS = textwrap.dedent('''
    """logins: sign-in attempts (a stream of this team's own)."""
    from pyspark.sql import types as T

    from streaming_jobs.schemas import Field, StreamSchema

    STREAM = StreamSchema(name="logins", key="event_id", event_time="event_time", fields=(
        Field("event_id", T.StringType(), "unique id of the attempt"),
        Field("user_id", T.StringType(), "who tried"),
        Field("outcome", T.StringType(), "ok or failed"),
        Field("event_time", T.TimestampType(), "when (UTC)"),
    ))
''')

FAILED_LOGINS_SQL = textwrap.dedent("""\
    -- failed_logins_10m: failed sign-ins per user per 10-minute window.
    -- State: one count per open window, bounded by the 5-minute watermark.
    --
    -- source: logins
    -- keys: user_id, window_start, window_end
    -- measures: failures
    -- watermark: 5 minutes
    select user_id, window.start as window_start, window.end as window_end,
           count(*) as failures
    from events
    where outcome = 'failed'
    group by user_id, window(event_time, '10 minutes')
""")


def login(event_id: str, user: str, minute: int, outcome: str = "failed") -> dict:
    return {
        "event_id": event_id,
        "user_id": user,
        "outcome": outcome,
        "event_time": f"2026-01-01T00:{minute:02d}:00.000Z",
    }


# wave 1: watermark 21 - 5 = 16. wave 2: the failure at minute 8 is behind it (late);
# watermark 35 - 5 = 30, so windows ending by 30 are final and [30, 40) is open.
LOGIN_WAVES = [
    [
        login("l1", "u1", 1),
        login("l2", "u1", 3),
        login("l2", "u1", 3),
        login("l3", "u1", 4, "ok"),
        login("l4", "u2", 12),
        login("l5", "u1", 21),
    ],
    [login("l6", "u1", 8), login("l7", "u2", 35)],
]


def failures_per_window(events) -> Counter:
    distinct = {e["event_id"]: e for e in events if e["outcome"] == "failed"}
    return Counter(
        (e["user_id"], int(e["event_time"][14:16]) // 10 * 10) for e in distinct.values()
    )


@pytest.fixture
def team_folder(tmp_path, monkeypatch):
    folder = tmp_path / "team_jobs"
    folder.mkdir()
    (folder / "logins.py").write_text(LOGINS)
    (folder / "failed_logins_10m.sql").write_text(FAILED_LOGINS_SQL)
    monkeypatch.setenv("TIDEMARK_JOBS_PATH", str(folder))
    return folder


@pytest.mark.slow
def test_a_sql_job_over_a_new_stream_is_one_file_each_and_reconciles(spark, cfg, team_folder):
    from helpers import dbt
    from orchestration.defs.streaming.assets import streaming_assets
    from orchestration.recon.dbt_models import reconciled_jobs
    from orchestration.recon.dbt_vars import job_vars

    keys = {key.to_user_string() for a in streaming_assets() for key in a.keys}
    assert {"bronze/logins", "gold/failed_logins_10m"} <= keys
    assert "failed_logins_10m" in job_vars(reconciled_jobs())
    spec = get_job("failed_logins_10m")
    assert spec.description == "failed sign-ins per user per 10-minute window."

    late = 0
    for wave, events in enumerate(LOGIN_WAVES):
        land(cfg, f"w{wave}.jsonl", events, stream="logins")
        run_bronze(spark, cfg, "logins")
        late += run_job(spark, cfg, spec).late_rows_dropped
    assert late == 1

    everything = [e for wave in LOGIN_WAVES for e in wave]
    on_time = failures_per_window([e for e in everything if e["event_id"] != "l6"])
    truth = failures_per_window(everything)
    gold = {
        (r.user_id, r.window_start.minute if r.window_start.hour == 0 else None): r.failures
        for r in read_table(spark, cfg.paths.table("gold", spec.name)).collect()
    }
    assert gold == {k: n for k, n in on_time.items() if k[1] + 10 <= 30}

    result = dbt("build", "--select", "+recon_failed_logins_10m", "+int_late_events")
    assert result.returncode == 0, result.stdout[-3000:]
    recon = read_table(spark, cfg.paths.dbt_table("recon", "recon_failed_logins_10m")).collect()
    got = {(r.user_id, r.window_start.minute): r.recon_class for r in recon}
    expected = {
        k: (
            "window_open"
            if k[1] + 10 > 30
            else "match"
            if truth[k] == on_time.get(k)
            else "late_dropped"
        )
        for k in truth
    }
    assert (
        got
        == expected
        == {
            ("u1", 0): "late_dropped",
            ("u2", 10): "match",
            ("u1", 20): "match",
            ("u2", 30): "window_open",
        }
    )
    replay = (
        read_table(spark, cfg.paths.dbt_table("batch", "int_late_events"))
        .where("job = 'failed_logins_10m'")
        .collect()[0]
    )
    assert replay.late_events_replayed == replay.late_events_reported == 1


def _meter(event_id: str, device: str, minute: float) -> dict:
    from datetime import datetime, timedelta

    t = datetime(2026, 1, 1) + timedelta(minutes=minute)
    return {
        "event_id": event_id,
        "device_id": device,
        "value": 1.0,
        "event_time": t.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
    }


# (wave, event id, device, minute): d1's first epoch is forgotten once the watermark (max - 10
# minutes) passes its last event + 30 minutes; m9 arrives behind the watermark (60) and is
# dropped as late; m2 comes twice; m8 arrives before m7, out of order
METER_EVENTS = [
    (0, "m1", "d1", 0),
    (0, "m2", "d1", 5),
    (0, "m2", "d1", 5),
    (0, "m3", "d1", 20),
    (0, "m4", "d2", 0),
    (1, "m5", "d1", 60),
    (1, "m6", "d2", 25),
    (1, "m8", "d3", 75),
    (1, "m7", "d3", 70),
    (2, "m9", "d1", 58),
    (2, "m10", "d2", 100),
    (2, "m11", "d4", 101),
]


def newest_epochs(events: list[tuple]) -> dict[str, tuple[int, float]]:
    """Per device, (events, active seconds) of its newest run of events no two of which are
    more than 30 minutes apart (plain Python, each event id once)."""
    times: dict[str, set] = {}
    for _, event_id, device, minute in events:
        times.setdefault(device, set()).add((minute, event_id))
    out = {}
    for device, seen in times.items():
        minutes = sorted(m for m, _ in seen)
        start = 0
        for i in range(1, len(minutes)):
            if minutes[i] - minutes[i - 1] > 30:
                start = i
        out[device] = (len(minutes) - start, (minutes[-1] - minutes[start]) * 60.0)
    return out


@pytest.mark.slow
def test_the_keyed_scaffold_runs_and_reconciles(spark, cfg, tmp_path, monkeypatch):
    from helpers import dbt
    from orchestration.recon import recon_runs
    from orchestration.cli.scaffold import scaffold

    folder = tmp_path / "team_jobs"
    monkeypatch.setenv("TIDEMARK_JOBS_PATH", str(folder))
    scaffold("stream", "meters", folder=str(folder))
    path = scaffold(
        "job", "meter_activity", folder=str(folder), source="meters", sql=False, keyed=True
    )
    assert path.name == "meter_activity.py" and not load_problems()
    spec = get_job("meter_activity")
    assert (spec.keys, spec.output_mode, spec.state.ttl) == (("device_id",), "update", "30 minutes")

    late = 0
    for wave in range(3):
        land(
            cfg,
            f"w{wave}.jsonl",
            [_meter(e, d, m) for w, e, d, m in METER_EVENTS if w == wave],
            stream="meters",
        )
        run_bronze(spark, cfg, "meters")
        late += run_job(spark, cfg, spec).late_rows_dropped
    assert late == 1  # m9

    on_time = newest_epochs([e for e in METER_EVENTS if e[1] != "m9"])
    truth = newest_epochs(METER_EVENTS)
    gold = {
        r.device_id: (r.events, r.active_seconds)
        for r in read_table(spark, cfg.paths.table("gold", spec.name)).collect()
    }
    assert gold == on_time == {"d1": (1, 0.0), "d2": (1, 0.0), "d3": (2, 300.0), "d4": (1, 0.0)}

    result = dbt("build", "--select", "+recon_meter_activity", "+int_late_events")
    assert result.returncode == 0, result.stdout[-3000:]
    recon = read_table(spark, cfg.paths.dbt_table("recon", "recon_meter_activity")).collect()
    got = {r.device_id: r.recon_class for r in recon}
    assert truth["d1"] != on_time["d1"]  # the late event would have joined d1's newest epoch
    assert got == {d: "match" if truth[d] == on_time[d] else "late_dropped" for d in truth}
    assert got["d1"] == "late_dropped"
    row = recon_runs.status(cfg).jobs["meter_activity"]
    assert (row["status"], row["unexplained_rows"], row["rows_compared"]) == ("passed", 0, 4)


PAID_ORDERS = """-- paid_orders_10m: orders paid within 20 minutes, per 10-minute window of the order time.
-- source: orders
-- joins: payments
-- keys: window_start, window_end
-- measures: paid
-- watermark: 5 minutes
select window.start as window_start, window.end as window_end, count(*) as paid
from (
    select o.order_time
    from orders o join payments p
      on o.order_id = p.order_id
     and p.payment_time between o.order_time and o.order_time + interval 20 minutes
)
group by window(order_time, '10 minutes')
"""


def _order(order_id: str, minute: int) -> dict:
    return {
        "event_id": f"o-{order_id}",
        "order_id": order_id,
        "user_id": "u1",
        "amount": 1.0,
        "order_time": f"2026-01-01T00:{minute:02d}:00.000Z",
    }


def _payment(order_id: str, minute: int) -> dict:
    return {
        "event_id": f"p-{order_id}",
        "payment_id": f"pay-{order_id}",
        "order_id": order_id,
        "amount": 1.0,
        "payment_time": f"2026-01-01T00:{minute:02d}:00.000Z",
    }


@pytest.mark.long  # about 100 s: make test-long (CI's time budget)
def test_a_window_after_a_time_bounded_join_reconciles_with_nothing_unexplained_by_default(
    spark, cfg, tmp_path, monkeypatch
):
    """Spark holds the windows after the join back by its 20-minute bound: windows that end
    within 20 minutes of the watermark are not emitted yet, and are window_open, not missing."""
    from helpers import dbt
    from streaming_jobs.runtime.analysis import checked

    folder = tmp_path / "jobs"
    folder.mkdir()
    (folder / "paid_orders_10m.sql").write_text(PAID_ORDERS)
    monkeypatch.setenv("TIDEMARK_JOBS_PATH", str(folder))
    [info] = [f for f in checked(cfg) if f.job == "paid_orders_10m"]
    assert info.level == "info" and info.delay_seconds in (1200, 1201)  # the bound, to the ms
    spec = get_job("paid_orders_10m")
    assert spec.recon_open_when == (
        f"coalesce(t.window_end, o.window_end) > s.stream_watermark - interval "
        f"{info.delay_seconds} seconds"
    )

    minutes = {"a": 1, "b": 12, "c": 24, "d": 33, "e": 44, "f": 52, "g": 57}  # e is never paid
    waves = [[k for k, m in minutes.items() if m < 30], [k for k, m in minutes.items() if m >= 30]]
    for wave, ids in enumerate(waves):
        land(cfg, f"o{wave}.jsonl", [_order(i, minutes[i]) for i in ids], stream="orders")
        land(
            cfg,
            f"p{wave}.jsonl",
            [_payment(i, minutes[i] + 2) for i in ids if i != "e"],
            stream="payments",
        )
        run_bronze(spark, cfg, "orders")
        run_bronze(spark, cfg, "payments")
        run_job(spark, cfg, spec)
    # the watermark is the slower stream's: orders' 00:57 - 5 min = 00:52; the join holds the
    # windows back to 00:32, so [30, 40) and [50, 60) are not emitted yet
    gold = {
        r.window_start.minute: r.paid
        for r in read_table(spark, cfg.paths.table("gold", spec.name)).collect()
    }
    assert gold == {0: 1, 10: 1, 20: 1}

    result = dbt("build", "--select", "+recon_paid_orders_10m")
    assert result.returncode == 0, result.stdout[-3000:]
    recon = read_table(spark, cfg.paths.dbt_table("recon", "recon_paid_orders_10m")).collect()
    got = {r.window_start.minute: r.recon_class for r in recon}
    assert got == {0: "match", 10: "match", 20: "match", 30: "window_open", 50: "window_open"}


def login_on(event_id: str, user: str, day: int, minute: int) -> dict:
    return {
        "event_id": event_id,
        "user_id": user,
        "outcome": "failed",
        "event_time": f"2026-01-{day:02d}T00:{minute:02d}:00.000Z",
    }


@pytest.mark.long  # about 100 s: make test-long (CI's time budget)
@pytest.mark.own_sql
def test_a_windowed_sql_jobs_next_reconciliation_recomputes_only_the_days_it_changed(
    spark, endpoint_cfg, team_folder
):
    """A SQL job over windows of one stream is reconciled by the day its window ends: the
    second run replaces only the days from the first that changed (two builds in the
    endpoint's one warm JVM), with every row's class checked. That an incremental run equals a
    backfill is proven on the built-in jobs (test_recon_incremental.py, make test-long)."""
    from helpers import dbt, scopes
    from streaming_jobs.core.delta_log import commit_actions, latest_version

    cfg = endpoint_cfg
    spec = get_job("failed_logins_10m")
    assert (spec.recon_partition, spec.recon_read_back) == ("to_date(window_end)", "600 seconds")
    # the job's models and what records its position (nothing of the built-in jobs)
    select = ("--select", "+recon_failed_logins_10m", "+int_late_events", "recon_positions")

    def stream(name, events):
        land(cfg, name, events, stream="logins")
        run_bronze(spark, cfg, "logins")
        run_job(spark, cfg, spec)

    def classes():
        return {
            (r.user_id, r.window_start.day, r.window_start.minute): r.recon_class
            for r in read_table(
                spark, cfg.paths.dbt_table("recon", "recon_failed_logins_10m")
            ).collect()
        }

    # day 1 closes; u1's window on day 2 stays open (the watermark is day 1, 23:56)
    stream(
        "a.jsonl",
        [
            login_on("l1", "u1", 1, 1),
            login_on("l2", "u1", 1, 3),
            login_on("l2", "u1", 1, 3),
            login_on("l3", "u2", 1, 12),
            login_on("l4", "u1", 2, 1),
        ],
    )
    first = dbt("build", *select)
    assert first.returncode == 0, first.stdout[-3000:]
    assert scopes(first.stderr)["failed_logins_10m"] == "in full: first reconciliation"
    assert classes() == {("u1", 1, 0): "match", ("u2", 1, 10): "match", ("u1", 2, 0): "window_open"}

    # a click on day 3 moves the watermark past u1's day-2 window: days 2 and 3 change
    stream("b.jsonl", [login_on("l5", "u2", 3, 20)])
    second = dbt("build", *select)
    assert second.returncode == 0, second.stdout[-3000:]
    assert scopes(second.stderr)["failed_logins_10m"] == "from 2026-01-02"
    for kind, name in (
        ("batch", "int_failed_logins_10m__batch"),
        ("recon", "recon_failed_logins_10m"),
    ):
        table = cfg.paths.dbt_table(kind, name)
        [info] = [
            a["commitInfo"]
            for a in commit_actions(table, latest_version(table))
            if "commitInfo" in a
        ]
        assert "2026-01-02" in str(info.get("operationParameters")), info  # day 1 kept
    assert classes() == {
        ("u1", 1, 0): "match",
        ("u2", 1, 10): "match",
        ("u1", 2, 0): "match",
        ("u2", 3, 20): "window_open",
    }
