"""State-size levels with hysteresis, and the growth projection, against hand computations."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from streaming_jobs.operations.state import OperatorReading, Reading, growth, level
from streaming_jobs.spec import StateThresholds


def reading(hour: float, rows: int) -> Reading:
    return Reading("j", int(hour), datetime(2026, 1, 1) + timedelta(hours=hour),
                   (OperatorReading("dedupeWithinWatermark", rows, 0, 0),))


def test_growth_projects_when_state_reaches_critical_and_hysteresis_holds_the_level():
    limits = StateThresholds(warn_rows=100, critical_rows=1000, warn_bytes=10 ** 12,
                             critical_bytes=10 ** 13)
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
