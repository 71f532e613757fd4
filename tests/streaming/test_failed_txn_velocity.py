"""failed_txn_velocity (24 h sliding every 5 s, change points) against brute-force expectations."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

import scenarios
from helpers import txn
from streaming_jobs.storage.registry import get_job
from streaming_jobs.storage.lake import read_table


def _as_rows(change_points: dict, window_s: int) -> set:
    return {
        scenarios.as_key(u, end)[:1]
        + (
            scenarios.START + timedelta(seconds=end - window_s),
            scenarios.START + timedelta(seconds=end),
            n,
        )
        for (u, end), n in change_points.items()
    }


@pytest.mark.parametrize(
    "window,slide,window_s,slide_s",
    [
        ("1 minute", "5 seconds", 60, 5),
        ("24 hours", "5 seconds", 86_400, 5),
    ],
)
def test_build_on_static_events_equals_brute_force(spark, window, slide, window_s, slide_s):
    rng = random.Random(3)
    events = []
    for i in range(120):
        e = txn(
            f"e{i}",
            f"u{rng.randint(1, 4)}",
            rng.uniform(0, 180),
            status=rng.choice(["FAILED", "FAILED", "APPROVED"]),
        )
        events.append(e)
        if i % 17 == 0:
            events.append(dict(e))  # exact duplicate
    spec = replace(get_job("failed_txn_velocity"), params={"window": window, "slide": slide})
    frame = spark.createDataFrame(
        [
            (
                e["event_id"],
                e["user_id"],
                e["status"],
                datetime.fromisoformat(e["event_time"].replace("Z", "")),
            )
            for e in events
        ],
        "event_id string, user_id string, status string, event_time timestamp",
    )
    got = {
        (r.user_id, r.window_start, r.window_end, r.failed_count)
        for r in spec.apply(frame).collect()
    }
    assert got == _as_rows(scenarios.change_points(events, window_s, slide_s), window_s)


def test_stream_emits_closed_change_points_and_drops_late_events(spark, cfg):
    spec = get_job("failed_txn_velocity")
    late_total, metrics = scenarios.run_waves(spark, cfg)
    gold = read_table(spark, cfg.paths.table("gold", spec.name))
    got = {(r.user_id, r.window_start, r.window_end): r.failed_count for r in gold.collect()}
    assert got == scenarios.expected_stream_rows()
    assert 0 in got.values()  # counts that fell back to zero are emitted too
    assert late_total == len(scenarios.LATE)
    assert metrics.watermark == scenarios.START + timedelta(seconds=scenarios.FINAL_WATERMARK_S)


def test_state_is_bounded_by_the_watermark(spark, cfg):
    spec = get_job("failed_txn_velocity")
    scenarios.run_waves(spark, cfg)
    checkpoint = str(cfg.paths.checkpoint(spec.name))
    operators = {
        r.operatorName: r.operatorId
        for r in spark.read.format("state-metadata").load(checkpoint).collect()
    }
    state = (
        spark.read.format("statestore")
        .option("operatorId", operators["transformWithStateInPandasExec"])
        .option("stateVarName", "panes")
        .load(checkpoint)
    )
    held = {r.key.user_id: r.value for r in state.collect()}

    # u1 and u2: every pane is more than 24 h behind the watermark and their count is back to
    # 0, so they left state. u3 keeps the one pane of its event at minute 1600 (still inside
    # open windows), and a timer at the window end where that pane enters.
    pane_ms = int(
        (scenarios.START + timedelta(minutes=1600)).replace(tzinfo=timezone.utc).timestamp() * 1000
    )
    assert set(held) == {"u3"}
    assert list(held["u3"].starts) == [pane_ms] and list(held["u3"].counts) == [1]
    assert held["u3"].timer == pane_ms + scenarios.SLIDE_S * 1000

    progress = (
        read_table(spark, cfg.paths.table("ops", "stream_progress"))
        .where(f"job = '{spec.name}'")
        .orderBy("batch_id")
        .collect()
    )
    rows = [
        sum(op.rows for op in r.state_operators if op.operator.startswith("transformWith"))
        for r in progress
    ]
    assert rows[-1] < max(rows)  # the progress metrics see the shrink as well
