"""Shared first step of the jobs: drop exact duplicates by event id within the watermark."""

from __future__ import annotations

from pyspark.sql import DataFrame


def dedup_within_watermark(events: DataFrame, event_time: str, watermark: str,
                           key: str = "event_id") -> DataFrame:
    """Watermark ``events`` on ``event_time`` and keep the first copy of each ``key``.

    In a stream, events behind the watermark are dropped here, by this first stateful operator,
    so its rows-dropped-by-watermark metric counts late events one per line. On a static
    DataFrame (tests, backfills) plain dropDuplicates means the same thing.
    """
    timed = events.withWatermark(event_time, watermark)
    if events.isStreaming:
        return timed.dropDuplicatesWithinWatermark([key])
    return timed.dropDuplicates([key])
