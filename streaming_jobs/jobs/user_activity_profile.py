"""user_activity_profile: each user's running profile, forgotten after an idle TTL (event time).

Per user: ``visits`` (distinct clicks), ``total_spend``, ``first_activity``, ``last_activity``,
``active_seconds`` (last - first) and ``expires_at`` (last activity + TTL), over the user's
current *epoch*: the run of clicks, in event-time order, in which no two consecutive clicks are
more than ``ttl`` apart. A user idle for longer than the TTL is forgotten, and their next click
starts a new profile from zero. Output is upserted per user (MERGE, idempotent per batch), so
the gold table holds each user's latest profile; a row whose ``expires_at`` is behind the
watermark belongs to a user who is forgotten now.

State is bounded by the TTL, measured in event time so that a batch recomputation gives the same
answer: keyed state (``transformWithStateInPandas``) holds the user's recent epochs, and an
event-time timer at ``last_activity + ttl`` removes the user once the watermark passes it. Any
click arriving later is more than ``ttl`` after the last one, so forgetting never changes a
result. Epochs that no future click can reach are dropped on every call. Clicks arriving out of
order (but ahead of the watermark) are merged in event-time order, so a click that fills a gap
joins two epochs just as it would in the sorted batch.

Spark's own ``ttlDurationMs`` is not used: it counts processing time, which would make the
result depend on when the job ran. Clicks behind the watermark are dropped and counted by the
deduplication operator (the first stateful operator); exact duplicates count once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

import numpy as np
from pyspark.sql import DataFrame
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

from streaming_jobs.schemas import CLICKS
from streaming_jobs.stateful.dedup import dedup_stream
from streaming_jobs.stateful.epochs import Epochs
from streaming_jobs.stateful.frames import epoch_ms, timestamps
from streaming_jobs.intervals import interval_seconds
from streaming_jobs.spec import JobSpec, StateBound, StateThresholds

if TYPE_CHECKING:  # imported where used: importing pandas takes 0.3 s or more, and
    # Spark imports this module at every start of a keyed-state query (its processor's init)
    import pandas as pd

OUTPUT = (
    "user_id string, visits long, total_spend double, active_seconds double, "
    "first_activity timestamp, last_activity timestamp, expires_at timestamp"
)
STATE = "first array<long>, last array<long>, count array<long>, total array<double>, timer long"


def latest_profile(user: str, epochs: Epochs, ttl_ms: int) -> pd.DataFrame:
    import pandas as pd

    i = int(np.argmax(epochs.first))
    return pd.DataFrame(
        {
            "user_id": [user],
            "visits": [int(epochs.count[i])],
            "total_spend": [float(epochs.total[i])],
            "active_seconds": [(int(epochs.last[i]) - int(epochs.first[i])) / 1000.0],
            "first_activity": timestamps([epochs.first[i]]),
            "last_activity": timestamps([epochs.last[i]]),
            "expires_at": timestamps([epochs.last[i] + ttl_ms]),
        }
    )


class ProfileProcessor(StatefulProcessor):
    def __init__(self, ttl_ms: int) -> None:
        self.ttl_ms = ttl_ms

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.state = handle.getValueState("epochs", STATE)

    def _load(self) -> tuple[Epochs, int | None]:
        stored = self.state.get() if self.state.exists() else None
        if stored is None:
            return Epochs.empty(), None
        first, last, count, total, timer = stored
        return Epochs(
            np.asarray(first, dtype=np.int64),
            np.asarray(last, dtype=np.int64),
            np.asarray(count, dtype=np.int64),
            np.asarray(total, dtype=np.float64),
        ), timer

    def _store(self, epochs: Epochs, timer: int | None, watermark_ms: int) -> None:
        epochs = epochs.forget(watermark_ms, self.ttl_ms)
        if not len(epochs):
            self.state.clear()  # idle past the TTL: the user is forgotten
            return
        wanted = int(epochs.last.max()) + self.ttl_ms
        if timer is not None and timer != wanted and timer > watermark_ms:
            self.handle.deleteTimer(timer)
        if timer != wanted:
            self.handle.registerTimer(wanted)
        self.state.update(
            (
                epochs.first.tolist(),
                epochs.last.tolist(),
                epochs.count.tolist(),
                epochs.total.tolist(),
                wanted,
            )
        )

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        epochs, timer = self._load()
        for batch in rows:
            epochs = epochs.merge(
                epoch_ms(batch["event_time"]),
                batch["amount"].to_numpy(dtype=np.float64),
                self.ttl_ms,
            )
        profile = latest_profile(key[0], epochs, self.ttl_ms)
        self._store(epochs, timer, timerValues.getCurrentWatermarkInMs())
        yield profile

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        epochs, _ = self._load()
        self._store(epochs, None, timerValues.getCurrentWatermarkInMs())
        return iter([])

    def close(self) -> None:
        pass


def build(clicks: DataFrame, *, ttl: str, watermark: str) -> DataFrame:
    ttl_s = interval_seconds(ttl)
    if not ttl_s:
        raise ValueError(f"user_activity_profile: ttl={ttl!r} is not an interval like '30 minutes'")
    ttl_ms = ttl_s * 1000
    deduped = dedup_stream(clicks, CLICKS, watermark)
    grouped = deduped.select("user_id", "event_time", "amount").groupBy("user_id")
    if deduped.isStreaming:
        return grouped.transformWithStateInPandas(
            ProfileProcessor(ttl_ms), OUTPUT, "Update", "EventTime"
        )

    def profile(frame: pd.DataFrame) -> pd.DataFrame:
        epochs = Epochs.empty().merge(
            epoch_ms(frame["event_time"]), frame["amount"].to_numpy(dtype=np.float64), ttl_ms
        )
        return latest_profile(frame["user_id"].iloc[0], epochs, ttl_ms)

    return grouped.applyInPandas(profile, OUTPUT)


SPEC = JobSpec(
    name="user_activity_profile",
    description="Per-user running profile (visits, spend, last activity), forgotten after an "
    "idle TTL in event time; upserted",
    source="clicks",
    keys=("user_id",),
    measures=("visits", "total_spend", "active_seconds"),
    event_time="event_time",
    state=StateBound(watermark="10 minutes", ttl="30 minutes"),
    output_mode="update",
    build=build,
    thresholds=StateThresholds(warn_rows=100_000, critical_rows=500_000),
    tolerance=1e-6,
    # no day, but an incremental reconciliation composes the profiles of the users with new
    # clicks from their kept profile (dbt's int_user_activity_profile__batch)
    recon_composed=True,
)
