"""user_sessions against expectations built by hand and by a plain-Python sessionizer."""

from __future__ import annotations

from datetime import datetime, timedelta

from pyspark.testing import assertDataFrameEqual

from helpers import click, clicks_per_user, land
from streaming_jobs.storage.registry import get_job
from streaming_jobs.storage.lake import read_table
from streaming_jobs.runtime.runner import run_bronze, run_job

T0 = datetime(2026, 1, 1)
GAP = timedelta(minutes=5)


def sessions(events) -> dict:
    """Plain Python: per user, split sorted distinct clicks where the pause exceeds the gap."""
    out = {}
    for user, clicks in clicks_per_user(events).items():
        groups = [[clicks[0]]]
        for t, amount in clicks[1:]:
            if t - groups[-1][-1][0] > GAP:
                groups.append([])
            groups[-1].append((t, amount))
        for g in groups:
            start, last = g[0][0], g[-1][0]
            out[(user, start, last + GAP)] = (
                len(g),
                (last - start).total_seconds(),
                sum(a for _, a in g),
            )
    return out


def test_build_splits_sessions_on_the_gap(spark):
    spec = get_job("user_sessions")
    rows = [
        ("a", "u1", T0, 0.0),
        ("a", "u1", T0, 0.0),  # duplicate
        ("b", "u1", T0 + timedelta(minutes=4), 10.0),
        ("c", "u1", T0 + timedelta(minutes=9), 5.0),  # exactly one gap later: same session
        ("e", "u1", T0 + timedelta(minutes=14.5), 1.0),  # more than a gap later: new one
        ("d", "u2", T0 + timedelta(minutes=1), 0.0),
    ]
    clicks = spark.createDataFrame(
        rows, "event_id string, user_id string, event_time timestamp, amount double"
    )
    m = lambda x: T0 + timedelta(minutes=x)
    expected = spark.createDataFrame(
        [
            ("u1", m(0), m(14), 3, 540.0, 15.0),
            ("u1", m(14.5), m(19.5), 1, 0.0, 1.0),
            ("u2", m(1), m(6), 1, 0.0, 0.0),
        ],
        "user_id string, window_start timestamp, window_end timestamp, clicks long, "
        "duration_seconds double, spend double",
    )
    assertDataFrameEqual(spec.apply(clicks), expected)


def test_stream_emits_closed_sessions_without_late_clicks(spark, cfg):
    spec = get_job("user_sessions")
    wave_1 = [
        click("1", "u1", 0),
        click("2", "u1", 3, 12.5),
        click("3", "u1", 20),
        click("4", "u2", 2),
        click("5", "u2", 60),
    ]
    # watermark after wave 1: 60 - 10 = 50. Click 6 at minute 10 is late: it would have
    # bridged u1's sessions at 3 and 20 in the truth, but the stream drops it.
    wave_2 = [click("6", "u1", 10), click("7", "u1", 62), click("8", "u2", 120)]
    late = 0
    for name, events in (("w1.jsonl", wave_1), ("w2.jsonl", wave_2)):
        land(cfg, name, events, stream="clicks")
        run_bronze(spark, cfg, "clicks")
        late += run_job(spark, cfg, spec).late_rows_dropped
    watermark = T0 + timedelta(minutes=110)
    expected = {
        k: v
        for k, v in sessions([e for e in wave_1 + wave_2 if e["event_id"] != "6"]).items()
        if k[2] <= watermark
    }
    got = {
        (r.user_id, r.window_start, r.window_end): (r.clicks, r.duration_seconds, r.spend)
        for r in read_table(spark, cfg.paths.table("gold", spec.name)).collect()
    }
    assert got == expected
    assert late == 1
