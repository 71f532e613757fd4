"""Activity epochs with an idle TTL: the arithmetic, free of Spark.

An epoch is a run of one key's events in which each event comes at most ``ttl`` after the
previous one (in event time). The next event more than ``ttl`` later starts a new epoch from
zero: the key was forgotten. Epochs are kept as parallel arrays (first, last, count, total),
sorted by first and separated by gaps of more than ``ttl``.

`merge` folds new events in, in any arrival order: a new event may extend an epoch on either
side, or bridge two and merge them, exactly as if all events had arrived sorted.

All times are epoch milliseconds (int64).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Epochs:
    first: np.ndarray
    last: np.ndarray
    count: np.ndarray
    total: np.ndarray

    @classmethod
    def empty(cls) -> "Epochs":
        return cls(*(np.array([], dtype=t) for t in (np.int64, np.int64, np.int64, np.float64)))

    def __len__(self) -> int:
        return len(self.first)

    def merge(self, times_ms: np.ndarray, amounts: np.ndarray, ttl_ms: int) -> "Epochs":
        """These epochs with one event more at each of ``times_ms`` (with its amount)."""
        first = np.concatenate([self.first, times_ms])
        last = np.concatenate([self.last, times_ms])
        count = np.concatenate([self.count, np.ones(len(times_ms), dtype=np.int64)])
        total = np.concatenate([self.total, np.asarray(amounts, dtype=np.float64)])
        order = np.lexsort((last, first))
        first, last, count, total = first[order], last[order], count[order], total[order]
        # sweep: a run starts where the gap to the latest end seen so far exceeds the ttl
        reach = np.maximum.accumulate(last)
        starts = (
            np.concatenate([[True], first[1:] - reach[:-1] > ttl_ms])
            if len(first)
            else np.array([], dtype=bool)
        )
        group = np.cumsum(starts) - 1
        n = int(group[-1]) + 1 if len(group) else 0
        return Epochs(
            first=first[starts],
            last=np.maximum.reduceat(last, np.flatnonzero(starts)) if n else last[:0],
            count=np.bincount(group, weights=count, minlength=n).astype(np.int64),
            total=np.bincount(group, weights=total, minlength=n),
        )

    def forget(self, watermark_ms: int, ttl_ms: int) -> "Epochs":
        """Drop the epochs no future event can extend: their last event + ttl <= watermark."""
        keep = self.last + ttl_ms > watermark_ms
        return Epochs(self.first[keep], self.last[keep], self.count[keep], self.total[keep])
