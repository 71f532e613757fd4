"""Sliding-window counts per key that scale with panes, not with size / slide.

Spark's ``window(ts, size, slide)`` copies every event into ``size / slide`` windows: 17,280
copies for a 24-hour window sliding every 5 seconds. `sliding_counts` instead keeps, per key,
the count of each non-empty slide-sized pane in keyed state (``transformWithStateInPandas``)
and emits, as the watermark passes them, only the windows whose count *changes*: one row per
change point, zero included. A consumer reads the count of any window as the latest row at or
before that window's end; the latest row per key is the current value.

State per key is one value (the pane starts and counts as two arrays, the last emitted window
end and count), so each key costs one state read and one write per micro-batch. It is bounded by
the watermark: a pane is dropped once every window holding it has been emitted, and a key whose
panes are all gone and whose last count is 0 is removed. One event-time timer per key, at its
next change point, emits windows for keys that receive no new events.

Late events never reach this operator: the job's deduplication (the first stateful operator)
drops them and counts them. A new event is therefore always later than the watermark, and so
later than every window end already emitted: emitted rows are final.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

import numpy as np
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

from streaming_jobs.stateful import panes
from streaming_jobs.stateful.frames import epoch_ms, timestamps
from streaming_jobs.intervals import interval_seconds

if TYPE_CHECKING:  # imported where used: importing pandas takes 0.3 s or more, and
    # Spark imports this module at every start of a keyed-state query (its processor's init)
    import pandas as pd

STATE_SCHEMA = (
    "starts array<long>, counts array<long>, emitted_end long, emitted_value long, timer long"
)


def _ms(interval: str, what: str) -> int:
    seconds = interval_seconds(interval)
    if not seconds:
        raise ValueError(f"sliding window: {what}={interval!r} is not an interval like '5 seconds'")
    return seconds * 1000


def _frame(
    key_col: str, key, ends: np.ndarray, values: np.ndarray, size_ms: int, count_col: str
) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(
        {
            key_col: [key] * len(ends),
            "window_start": timestamps(ends - size_ms),
            "window_end": timestamps(ends),
            count_col: values.astype("int64"),
        }
    )


class PaneCounter(StatefulProcessor):
    """Per key: pane counts in state, change points out as the watermark passes them."""

    def __init__(
        self, key_col: str, time_col: str, count_col: str, size_ms: int, slide_ms: int
    ) -> None:
        self.key_col, self.time_col, self.count_col = key_col, time_col, count_col
        self.size_ms, self.slide_ms = size_ms, slide_ms

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.state = handle.getValueState("panes", STATE_SCHEMA)

    def _load(self):
        stored = self.state.get() if self.state.exists() else None
        if stored is None:
            empty = np.array([], dtype=np.int64)
            return empty, empty, None, 0, None
        starts, counts, emitted_end, emitted_value, timer = stored
        return (
            np.asarray(starts, dtype=np.int64),
            np.asarray(counts, dtype=np.int64),
            emitted_end,
            emitted_value,
            timer,
        )

    def _advance(
        self, key, starts, counts, emitted_end, emitted_value, timer, watermark_ms: int
    ) -> Iterator[pd.DataFrame]:
        ends, values = panes.change_points(
            starts,
            counts,
            size_ms=self.size_ms,
            slide_ms=self.slide_ms,
            after_ms=emitted_end,
            until_ms=watermark_ms,
            last_value=emitted_value,
        )
        if len(ends):
            emitted_value = int(values[-1])
            yield _frame(self.key_col, key[0], ends, values, self.size_ms, self.count_col)
        emitted_end = watermark_ms if emitted_end is None else max(emitted_end, watermark_ms)
        starts, counts = panes.drop_departed(
            starts, counts, size_ms=self.size_ms, slide_ms=self.slide_ms, until_ms=emitted_end
        )
        wanted = panes.next_change_after(
            starts, size_ms=self.size_ms, slide_ms=self.slide_ms, after_ms=emitted_end
        )
        if timer is not None and timer != wanted and timer > watermark_ms:
            self.handle.deleteTimer(timer)
        if wanted is not None and wanted != timer:
            self.handle.registerTimer(wanted)
        if len(starts) == 0 and emitted_value == 0:
            self.state.clear()  # nothing left to emit: the key leaves state
            return
        self.state.update((starts.tolist(), counts.tolist(), emitted_end, emitted_value, wanted))

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        starts, counts, emitted_end, emitted_value, timer = self._load()
        for batch in rows:
            starts, counts = panes.add_to_panes(
                starts, counts, panes.pane_starts(epoch_ms(batch[self.time_col]), self.slide_ms)
            )
        yield from self._advance(
            key,
            starts,
            counts,
            emitted_end,
            emitted_value,
            timer,
            timerValues.getCurrentWatermarkInMs(),
        )

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        starts, counts, emitted_end, emitted_value, _ = self._load()
        yield from self._advance(
            key,
            starts,
            counts,
            emitted_end,
            emitted_value,
            None,
            timerValues.getCurrentWatermarkInMs(),
        )

    def close(self) -> None:
        pass


def sliding_counts(
    events: DataFrame, *, key: str, event_time: str, size: str, slide: str, count_col: str
) -> DataFrame:
    """Change points of the per-``key`` count over sliding windows of ``size`` every ``slide``.

    ``events`` must already carry the watermark (the job's deduplication sets it). On a static
    DataFrame every window is final, so all change points come out at once.
    """
    size_ms, slide_ms = _ms(size, "window"), _ms(slide, "slide")
    if size_ms % slide_ms:
        raise ValueError(f"sliding window: window {size!r} must be a multiple of slide {slide!r}")
    schema = f"{key} string, window_start timestamp, window_end timestamp, {count_col} long"
    slim = events.select(key, event_time)
    grouped = slim.groupBy(key)
    if events.isStreaming:
        return grouped.transformWithStateInPandas(
            PaneCounter(key, event_time, count_col, size_ms, slide_ms),
            schema,
            "Append",
            "EventTime",
        )

    def all_change_points(frame: pd.DataFrame) -> pd.DataFrame:
        none = np.array([], dtype=np.int64)
        starts, counts = panes.add_to_panes(
            none, none, panes.pane_starts(epoch_ms(frame[event_time]), slide_ms)
        )
        ends, values = panes.change_points(
            starts,
            counts,
            size_ms=size_ms,
            slide_ms=slide_ms,
            after_ms=None,
            until_ms=None,
            last_value=0,
        )
        return _frame(key, frame[key].iloc[0], ends, values, size_ms, count_col)

    return grouped.applyInPandas(all_change_points, schema).select(
        key, F.col("window_start"), F.col("window_end"), count_col
    )
