"""A hand-built two-wave case for failed_txn_velocity, and its expectation built in plain Python.

The job's spec: a 24 h window sliding every 5 s, watermark 10 min. Minutes are after 2026-01-01.

wave 1: u1 FAILED at 5 and 20 (the one at 20 written twice), u2 FAILED at 50 and APPROVED at 51,
        u3 FAILED at 130                                   -> watermark 130 - 10 = 120
wave 2: u1 FAILED at 30 (behind the watermark: dropped as late), u2 FAILED at 125,
        u3 FAILED at 1600 (day 2), u2 APPROVED at 40 (behind the watermark too, but the job
        reads FAILED transactions only: neither kept nor counted late), u4 APPROVED at 1605
        (the watermark follows every transaction, read or not) -> watermark 1595

By the end the watermark is more than 24 h past the early events, so counts rise and fall back
to 0. The expectation counts events per window by brute force over every 5-second window end,
with no panes: #{events e : end - 24 h <= e < end}.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from helpers import land, txn

WINDOW_S, SLIDE_S, WATERMARK_DELAY_S = 24 * 3600, 5, 600
START = datetime(2026, 1, 1)

WAVE_1 = [
    txn("e1", "u1", 5),
    txn("e2", "u1", 20),
    txn("e2", "u1", 20),
    txn("e3", "u2", 50),
    txn("e4", "u2", 51, status="APPROVED"),
    txn("e5", "u3", 130),
]
WAVE_2 = [
    txn("e6", "u1", 30),
    txn("e7", "u2", 125),
    txn("e8", "u3", 1600),
    txn("a1", "u2", 40, status="APPROVED"),
    txn("a2", "u4", 1605, status="APPROVED"),
]
LATE = {"e6"}  # the late events the job reads (FAILED): what it counts as dropped late
FINAL_WATERMARK_S = 1595 * 60


def land_wave(cfg, wave: int) -> None:
    land(cfg, f"wave-{wave}.jsonl", WAVE_1 if wave == 1 else WAVE_2)


def _seconds(event: dict) -> float:
    t = datetime.fromisoformat(event["event_time"].replace("Z", ""))
    return (t - START).total_seconds()


def change_points(events, window_s: int = WINDOW_S, slide_s: int = SLIDE_S) -> dict:
    """{(user, window end in s): count} wherever a user's count differs from the window before."""
    per_user: dict[str, list[float]] = {}
    seen = set()
    for e in events:
        if e["status"] == "FAILED" and e["event_id"] not in seen:
            seen.add(e["event_id"])
            per_user.setdefault(e["user_id"], []).append(_seconds(e))
    out = {}
    for user, times in per_user.items():
        first = int(min(times) // slide_s) * slide_s
        previous = 0
        for end in range(first, int(max(times)) + window_s + 2 * slide_s, slide_s):
            count = sum(1 for t in times if end - window_s <= t < end)
            if count != previous:
                out[(user, end)] = count
                previous = count
    return out


def as_key(user: str, end_s: int) -> tuple:
    end = START + timedelta(seconds=end_s)
    return (user, end - timedelta(seconds=WINDOW_S), end)


def on_time_events() -> list[dict]:
    return [e for e in WAVE_1 + WAVE_2 if e["event_id"] not in LATE]


def expected_stream_rows() -> dict:
    """What the stream must have emitted after both waves: change points up to the watermark."""
    return {
        as_key(u, end): n
        for (u, end), n in change_points(on_time_events()).items()
        if end <= FINAL_WATERMARK_S
    }


def expected_recon_classes() -> dict:
    truth = change_points(WAVE_1 + WAVE_2)
    on_time = change_points(on_time_events())
    stream = {(u, end): n for (u, end), n in on_time.items() if end <= FINAL_WATERMARK_S}
    classes = {}
    for key in set(truth) | set(on_time):
        if key in stream:
            classes[as_key(*key)] = "match" if truth.get(key) == stream[key] else "late_dropped"
        elif key[1] > FINAL_WATERMARK_S:
            classes[as_key(*key)] = "window_open"
        else:
            assert key not in on_time  # the stream emits every closed on-time change point
            classes[as_key(*key)] = "late_dropped"
    return classes


def run_waves(spark, cfg):
    """Land and stream both waves (bronze, then the job); returns (late rows dropped, last metrics)."""
    from streaming_jobs.storage.registry import get_job
    from streaming_jobs.runtime.runner import run_bronze, run_job

    spec, late = get_job("failed_txn_velocity"), 0
    for wave in (1, 2):
        land_wave(cfg, wave)
        run_bronze(spark, cfg, "transactions")
        metrics = run_job(spark, cfg, spec)
        late += metrics.late_rows_dropped
    return late, metrics
