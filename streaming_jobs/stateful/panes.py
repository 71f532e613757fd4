"""Sliding-window counts from slide-sized panes: the arithmetic, free of Spark.

A sliding window of ``size`` that advances by ``slide`` (size a multiple of slide, both aligned
to the epoch like Spark's ``window()``) is the sum of the ``size / slide`` panes it covers. The
window ending at ``t`` (on the slide grid) covers the panes starting in ``[t - size, t)``. Its
count therefore changes only where a non-empty pane enters (``t = pane + slide``) or leaves
(``t = pane + size + slide``): at most two change points per non-empty pane, however large
``size / slide`` is. `change_points` finds them from sorted pane counts with two binary
searches, so the work grows with the number of panes, never with copies of each event.

All times are epoch milliseconds (int64).
"""

from __future__ import annotations

import numpy as np


def pane_starts(times_ms: np.ndarray, slide_ms: int) -> np.ndarray:
    """The start of the slide-sized pane holding each time (floor to the grid)."""
    return (times_ms // slide_ms) * slide_ms


def add_to_panes(
    starts: np.ndarray, counts: np.ndarray, new_starts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Pane counts (sorted by start) with one more event at each of ``new_starts``."""
    merged = np.concatenate([starts, new_starts])
    weights = np.concatenate([counts, np.ones(len(new_starts), dtype=np.int64)])
    unique, inverse = np.unique(merged, return_inverse=True)
    return unique, np.bincount(inverse, weights=weights).astype(np.int64)


def counts_at(starts: np.ndarray, counts: np.ndarray, ends: np.ndarray, size_ms: int) -> np.ndarray:
    """The count of each window ending at ``ends``: panes starting in [end - size, end)."""
    prefix = np.concatenate([[0], np.cumsum(counts)])
    hi = np.searchsorted(starts, ends, side="left")
    lo = np.searchsorted(starts, ends - size_ms, side="left")
    return prefix[hi] - prefix[lo]


def change_points(
    starts: np.ndarray,
    counts: np.ndarray,
    *,
    size_ms: int,
    slide_ms: int,
    after_ms: int | None,
    until_ms: int | None,
    last_value: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Window ends in ``(after_ms, until_ms]`` where the count differs from the one before.

    ``last_value`` is the count of the last window already emitted (0 before any). ``None``
    bounds are open. Returns (window ends, counts), ascending.
    """
    candidates = np.unique(np.concatenate([starts + slide_ms, starts + size_ms + slide_ms]))
    if after_ms is not None:
        candidates = candidates[candidates > after_ms]
    if until_ms is not None:
        candidates = candidates[candidates <= until_ms]
    if len(candidates) == 0:
        return candidates, candidates
    values = counts_at(starts, counts, candidates, size_ms)
    previous = np.concatenate([[last_value], values[:-1]])
    changed = values != previous
    return candidates[changed], values[changed]


def next_change_after(
    starts: np.ndarray, *, size_ms: int, slide_ms: int, after_ms: int
) -> int | None:
    """The first window end after ``after_ms`` where the count may change (a timer's time)."""
    candidates = np.concatenate([starts + slide_ms, starts + size_ms + slide_ms])
    later = candidates[candidates > after_ms]
    return int(later.min()) if len(later) else None


def drop_departed(
    starts: np.ndarray, counts: np.ndarray, *, size_ms: int, slide_ms: int, until_ms: int
) -> tuple[np.ndarray, np.ndarray]:
    """Forget panes that left every window ending at or before ``until_ms``."""
    keep = starts + size_ms + slide_ms > until_ms
    return starts[keep], counts[keep]
