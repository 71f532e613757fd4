"""Shared first step of the jobs: drop copies of one event within the watermark."""

from __future__ import annotations

from pyspark.sql import DataFrame

from streaming_jobs.schemas import StreamSchema


def dedup_within_watermark(
    events: DataFrame,
    event_time: str,
    watermark: str,
    key: str | tuple[str, ...] = "event_id",
    reads: str | None = None,
) -> DataFrame:
    """Watermark ``events`` on ``event_time`` and keep the first copy of each ``key``.

    ``key`` is one column or several. In a stream, events behind the watermark are dropped
    here, by this first stateful operator, so its rows-dropped-by-watermark metric counts late
    events one per line. On a static DataFrame (tests, backfills) plain dropDuplicates means the
    same thing.

    ``reads`` (SQL over the events' columns) keeps only the events the job needs, after the
    watermark and before the deduplication: the watermark still follows every event, while the
    state and the late count hold only the events kept (copies of one event share its fields,
    so which copy is first does not change). A job pays the deduplication of what it reads
    only: a fifth of the cost for failed_txn_velocity (docs/benchmarks.md, the velocity profile).
    """
    columns = [key] if isinstance(key, str) else list(key)
    timed = events.withWatermark(event_time, watermark)
    if reads:
        # Spark's optimizer moves a filter that does not name the event time below the
        # watermark (PushPredicateThroughNonJoin), and the watermark would then follow only the
        # rows kept: a rare kind of event would hold every window open. Naming the event time in
        # the same predicate (a clause no timestamp meets) keeps the filter above it.
        timed = timed.where(f"({reads}) or `{event_time}` < timestamp'0001-01-01 00:00:00'")
    if events.isStreaming:
        return timed.dropDuplicatesWithinWatermark(columns)
    return timed.dropDuplicates(columns)


def dedup_stream(
    events: DataFrame, stream: StreamSchema, watermark: str, reads: str | None = None
) -> DataFrame:
    """`dedup_within_watermark` on the stream's own event time and declared dedup key."""
    return dedup_within_watermark(
        events, stream.event_time, watermark, key=stream.dedup_key, reads=reads
    )
