"""State-size levels with hysteresis, and the growth projection, against hand computations."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from streaming_jobs.operations.state import OperatorReading, Reading, growth, level
from streaming_jobs.spec import StateThresholds


def reading(hour: float, rows: int) -> Reading:
    return Reading(
        "j",
        int(hour),
        datetime(2026, 1, 1) + timedelta(hours=hour),
        (OperatorReading("dedupeWithinWatermark", rows, 0, 0),),
    )


def test_growth_projects_when_state_reaches_critical_and_hysteresis_holds_the_level():
    limits = StateThresholds(
        warn_rows=100, critical_rows=1000, warn_bytes=10**12, critical_bytes=10**13
    )
    # 100 rows/hour, now at 400: 600 rows to go, 6 hours.
    trend = growth([reading(h, 100 + 100 * h) for h in range(4)], limits)
    assert trend.rows_per_hour == pytest.approx(100.0)
    assert trend.hours_to_critical == pytest.approx(6.0)
    assert growth([reading(h, 500 - 10 * h) for h in range(4)], limits).hours_to_critical is None
    assert growth([reading(0, 1), reading(1, 2)], limits) is None  # too few points

    assert level(reading(0, 101), limits)[0] == "warning"
    assert level(reading(0, 95), limits, previous="warning")[0] == "warning"  # within 10 %
    assert level(reading(0, 89), limits, previous="warning")[0] == "ok"
    assert level(reading(0, 95), limits, previous="ok")[0] == "ok"
    assert level(reading(0, 950), limits, previous="critical")[0] == "critical"
    assert level(reading(0, 850), limits, previous="critical")[0] == "warning"


def test_a_far_future_watermark_is_critical_and_a_high_late_share_warns():
    from datetime import datetime, timedelta

    from streaming_jobs.operations.health import lateness_findings

    now = datetime(2026, 11, 22, 12, 0)
    normal = [
        {
            "batch_id": b,
            "ts": now + timedelta(minutes=b),
            "num_input_rows": 100,
            "watermark": now + timedelta(minutes=b) - timedelta(minutes=10),
            "rows_dropped_by_watermark": 2,
        }
        for b in range(5)
    ]
    assert lateness_findings(normal, "j", late_share=0.5, watermark_ahead_seconds=86400) == []
    # an event dated 9999 arrives: the watermark leaps; later batches drop everything
    poisoned = normal + [
        {
            "batch_id": 5,
            "ts": now + timedelta(minutes=5),
            "num_input_rows": 1,
            "watermark": datetime(9999, 12, 30),
            "rows_dropped_by_watermark": 0,
        },
        *(
            {
                "batch_id": b,
                "ts": now + timedelta(minutes=b),
                "num_input_rows": 200,
                "watermark": datetime(9999, 12, 30),
                "rows_dropped_by_watermark": 200,
            }
            for b in range(6, 9)
        ),
    ]
    found = {
        f.kind: f
        for f in lateness_findings(poisoned, "j", late_share=0.5, watermark_ahead_seconds=86400)
    }
    assert set(found) == {"watermark_ahead", "late_share"}
    assert found["watermark_ahead"].severity == "critical"
    assert "batch 5 set the watermark to 9999-12-30" in found["watermark_ahead"].message
    assert (
        f"{5 * 2 + 3 * 200} of the 1,{5 * 100 + 1 + 3 * 200 - 1000:03d} rows"
        in found["late_share"].message
    )
    assert found["late_share"].severity == "warning"


def test_an_auto_repaired_snapshot_warns_with_spark_counters():
    from streaming_jobs.operations.health import repair_findings

    def batch(b, repaired=0, replayed=0):
        # delta-rs gives a map column as (key, value) pairs, as here
        custom = [
            ("rocksdbNumSnapshotsAutoRepaired", repaired),
            ("rocksdbNumReplayChangelogFiles", replayed),
            ("rocksdbGetCount", 7),
        ]
        return {
            "batch_id": b,
            "state_operators": [
                {"operator": "dedupeWithinWatermark", "custom": custom},
                {"operator": "stateStoreSave", "custom": None},
            ],
        }

    # changelog replays alone are how every load works with changelog checkpointing: silent
    assert repair_findings([batch(b, replayed=3) for b in range(4)], "j") == []
    [found] = repair_findings([batch(0), batch(1, repaired=2, replayed=11), batch(2)], "j")
    assert (found.kind, found.severity) == ("state_repaired", "warning")
    assert "repaired 2 state store(s) (dedupeWithinWatermark in batch 1)" in found.message
    assert "replaying 11 changelog file(s)" in found.message
