"""Shared first step of the jobs: drop copies of one event within the watermark."""

from __future__ import annotations

from pyspark.sql import DataFrame

from streaming_jobs.schemas import StreamSchema


def dedup_within_watermark(events: DataFrame, event_time: str, watermark: str,
                           key: str | tuple[str, ...] = "event_id") -> DataFrame:
    """Watermark ``events`` on ``event_time`` and keep the first copy of each ``key``.

    ``key`` is one column or several. In a stream, events behind the watermark are dropped
    here, by this first stateful operator, so its rows-dropped-by-watermark metric counts late
    events one per line. On a static DataFrame (tests, backfills) plain dropDuplicates means the
    same thing.
    """
    columns = [key] if isinstance(key, str) else list(key)
    timed = events.withWatermark(event_time, watermark)
    if events.isStreaming:
        return timed.dropDuplicatesWithinWatermark(columns)
    return timed.dropDuplicates(columns)


def dedup_stream(events: DataFrame, stream: StreamSchema, watermark: str) -> DataFrame:
    """`dedup_within_watermark` on the stream's own event time and declared dedup key."""
    return dedup_within_watermark(events, stream.event_time, watermark, key=stream.dedup_key)
