"""A hand-built two-wave case for failed_txn_velocity, and its expectation built in plain Python.

Window 60 min sliding by 15, watermark 10 min (the job's spec). Minutes are after 2026-01-01.

wave 1: u1 FAILED at 5 and 20 (the one at 20 written twice), u2 FAILED at 50 and APPROVED at 51,
        u3 FAILED at 130                                   -> watermark 130 - 10 = 120
wave 2: u1 FAILED at 30 (behind the watermark: dropped as late), u2 FAILED at 125,
        u3 FAILED at 200                                   -> watermark 190
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta

from conftest import land, txn

WINDOW, SLIDE, WATERMARK_DELAY = 60, 15, 10
START = datetime(2026, 1, 1)

WAVE_1 = [txn("e1", "u1", 5), txn("e2", "u1", 20), txn("e2", "u1", 20), txn("e3", "u2", 50),
          txn("e4", "u2", 51, status="APPROVED"), txn("e5", "u3", 130)]
WAVE_2 = [txn("e6", "u1", 30), txn("e7", "u2", 125), txn("e8", "u3", 200)]
LATE = {"e6"}
FINAL_WATERMARK_MIN = 190


def land_wave(cfg, wave: int) -> None:
    events = WAVE_1 if wave == 1 else WAVE_2
    land(cfg, f"wave-{wave}.jsonl", events)


def _minute(event: dict) -> float:
    t = datetime.fromisoformat(event["event_time"].replace("Z", ""))
    return (t - START).total_seconds() / 60


def window_counts(events) -> Counter:
    """Distinct FAILED events per (user, window start minute)."""
    seen, counts = set(), Counter()
    for e in events:
        if e["status"] != "FAILED" or e["event_id"] in seen:
            continue
        seen.add(e["event_id"])
        m = _minute(e)
        first = int(m // SLIDE) * SLIDE
        for start in range(first, first - WINDOW, -SLIDE):
            if start <= m < start + WINDOW:
                counts[(e["user_id"], start)] += 1
    return counts


def as_key(user: str, start_min: int) -> tuple:
    return (user, START + timedelta(minutes=start_min), START + timedelta(minutes=start_min + WINDOW))


def expected_stream_rows() -> dict:
    """What the stream must have emitted after both waves: closed windows of on-time events."""
    on_time = [e for e in WAVE_1 + WAVE_2 if e["event_id"] not in LATE]
    return {as_key(u, s): n for (u, s), n in window_counts(on_time).items()
            if s + WINDOW <= FINAL_WATERMARK_MIN}


def expected_recon_classes() -> dict:
    truth = window_counts(WAVE_1 + WAVE_2)
    stream = expected_stream_rows()
    on_time = window_counts([e for e in WAVE_1 + WAVE_2 if e["event_id"] not in LATE])
    classes = {}
    for (u, s), n in truth.items():
        key = as_key(u, s)
        if key in stream:
            classes[key] = "match" if stream[key] == n else "late_dropped"
        elif s + WINDOW > FINAL_WATERMARK_MIN:
            classes[key] = "window_open"
        else:
            assert on_time[(u, s)] == 0
            classes[key] = "late_dropped"
    return classes


def run_waves(spark, cfg):
    """Land and stream both waves (bronze, then the job); returns (late rows dropped, last metrics)."""
    from streaming_jobs.jobs import get_job
    from streaming_jobs.runner import run_bronze, run_job

    spec, late = get_job("failed_txn_velocity"), 0
    for wave in (1, 2):
        land_wave(cfg, wave)
        run_bronze(spark, cfg, "transactions")
        metrics = run_job(spark, cfg, spec)
        late += metrics.late_rows_dropped
    return late, metrics
