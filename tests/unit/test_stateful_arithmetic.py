"""The stateful jobs' arithmetic, free of Spark: sliding-window panes and idle-TTL epochs,
checked against brute force over every window and every arrival order."""

from __future__ import annotations

import random

import numpy as np
import pytest

from streaming_jobs.stateful import panes
from streaming_jobs.stateful.epochs import Epochs

SIZE, SLIDE = 60_000, 5_000  # a 60 s window sliding every 5 s, in milliseconds


def brute_counts(times: list[int], end: int) -> int:
    return sum(1 for t in times if end - SIZE <= t - t % SLIDE < end)


def test_change_points_equal_brute_force_over_every_window_end():
    rng = random.Random(3)
    times = sorted(rng.randrange(0, 200_000) for _ in range(40))
    starts, counts = panes.add_to_panes(
        np.array([], dtype=np.int64),
        np.array([], dtype=np.int64),
        panes.pane_starts(np.array(times, dtype=np.int64), SLIDE),
    )
    ends, values = panes.change_points(
        starts, counts, size_ms=SIZE, slide_ms=SLIDE, after_ms=None, until_ms=None, last_value=0
    )
    expected, previous = [], 0
    for end in range(0, 200_000 + SIZE + 2 * SLIDE, SLIDE):
        count = brute_counts(times, end)
        if count != previous:
            expected.append((end, count))
            previous = count
    assert list(zip(ends.tolist(), values.tolist())) == expected
    assert values[-1] == 0  # the count falls back to 0 once every pane has left


def test_panes_leave_state_once_every_window_holding_them_has_ended():
    starts = np.array([0, 5_000, 100_000], dtype=np.int64)
    counts = np.array([2, 1, 1], dtype=np.int64)
    kept = panes.drop_departed(starts, counts, size_ms=SIZE, slide_ms=SLIDE, until_ms=65_000)
    assert kept[0].tolist() == [5_000, 100_000]  # pane 0 was in windows ending up to 65 000
    assert panes.next_change_after(starts, size_ms=SIZE, slide_ms=SLIDE, after_ms=65_000) == 70_000


def sorted_epochs(events: list[tuple[int, float]], ttl: int) -> list[tuple[int, int, int, float]]:
    """Epochs by a plain sweep over the events in time order (the definition)."""
    out = []
    for t, amount in sorted(events):
        if out and t - out[-1][1] <= ttl:
            first, _, count, total = out[-1]
            out[-1] = (first, t, count + 1, total + amount)
        else:
            out.append((t, t, 1, amount))
    return out


@pytest.mark.parametrize("seed", range(5))
def test_epochs_merged_in_any_arrival_order_equal_the_sorted_sweep(seed):
    rng = random.Random(seed)
    ttl = 30_000
    events = [(rng.randrange(0, 400_000), float(rng.randrange(0, 5))) for _ in range(25)]
    order = events[:]
    rng.shuffle(order)
    epochs = Epochs.empty()
    for batch in (order[i : i + 4] for i in range(0, len(order), 4)):  # micro-batches
        epochs = epochs.merge(
            np.array([t for t, _ in batch], dtype=np.int64), np.array([a for _, a in batch]), ttl
        )
    got = list(
        zip(
            epochs.first.tolist(),
            epochs.last.tolist(),
            epochs.count.tolist(),
            epochs.total.tolist(),
        )
    )
    assert got == sorted_epochs(events, ttl)


def test_a_late_event_bridges_two_epochs_and_forget_drops_only_what_cannot_grow():
    ttl = 15
    epochs = Epochs.empty().merge(np.array([0, 5, 30], dtype=np.int64), np.ones(3), ttl)
    assert epochs.first.tolist() == [0, 30]  # 5 -> 30 is a pause longer than the ttl
    bridged = epochs.merge(np.array([18], dtype=np.int64), np.ones(1), ttl)  # 5 -> 18 -> 30
    assert (bridged.first.tolist(), bridged.count.tolist()) == ([0], [4])
    # [0, 5] cannot grow once the watermark reaches 5 + ttl; [30] still can
    assert epochs.forget(watermark_ms=20, ttl_ms=ttl).first.tolist() == [30]
