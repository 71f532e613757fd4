"""Spark interval strings ("15 minutes", "1 hour") as seconds, for batch SQL and checks."""

from __future__ import annotations

import re

UNITS = {
    "second": 1,
    "minute": 60,
    "hour": 3600,
    "day": 86400,
    "week": 604800,
}
_PART = re.compile(r"(\d+)\s*([a-z]+?)s?\b")


def interval_seconds(text: str) -> int | None:
    """``"1 hour 30 minutes"`` -> 5400; None if ``text`` is not an interval."""
    parts = _PART.findall(text.strip().lower())
    if not parts or _PART.sub("", text.strip().lower()).strip():
        return None
    total = 0
    for number, unit in parts:
        if unit not in UNITS:
            return None
        total += int(number) * UNITS[unit]
    return total
