"""failed_txn_velocity: FAILED transactions per user over a 24-hour window sliding every 5 s.

The fraud feature "how many failed payments did this user make in the last 24 hours", kept
exact at a 5-second grain. For each user and each window ``[end - window, end)`` with ``end``
on the ``slide`` grid, it counts the distinct FAILED transactions (exact duplicates, same
``event_id``, count once).

Output (append, exactly-once through the Delta sink): one row per *change* of a user's count,
``(user_id, window_start, window_end, failed_count)``, including the row where it falls back to
0. A window's count is the latest row at or before its end; the latest row per user is the
current value. Emitting every window instead would be 17,280 rows per isolated event: that is
the cost Spark's built-in ``window(ts, '24 hours', '5 seconds')`` pays, and why this job keeps
5-second pane counts per user in keyed state instead (`streaming_jobs.stateful.sliding`).

State is bounded by the watermark (10 minutes): deduplication state for an event goes when the
watermark passes its time; a pane goes once every window holding it is emitted (24 h after
the pane, plus the watermark delay); a user with no panes left and a count of 0 leaves state.
The watermark follows every transaction, but only FAILED ones are read past it (``READS``):
they alone are deduplicated, and FAILED events behind the watermark are dropped, and counted,
by the deduplication operator, the first stateful operator, so its
``numRowsDroppedByWatermark`` counts late FAILED events one per line. Deduplicating every
transaction first cost 5 times as much for the same answer (docs/benchmarks.md, the profile).
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from streaming_jobs.schemas import TRANSACTIONS
from streaming_jobs.stateful.dedup import dedup_stream
from streaming_jobs.stateful.sliding import sliding_counts
from streaming_jobs.spec import JobSpec, StateBound, StateThresholds


# The transactions the job reads: only these are deduplicated and counted late. The
# watermark still follows every transaction.
READS = "status = 'FAILED'"


def build(events: DataFrame, *, window: str, slide: str, watermark: str) -> DataFrame:
    """Bronze transactions in; change points of each user's FAILED count out."""
    failed = dedup_stream(events, TRANSACTIONS, watermark, reads=READS)
    return sliding_counts(
        failed,
        key="user_id",
        event_time="event_time",
        size=window,
        slide=slide,
        count_col="failed_count",
    )


SPEC = JobSpec(
    name="failed_txn_velocity",
    description="FAILED transactions per user over 24 h sliding every 5 s (change points)",
    source="transactions",
    keys=("user_id", "window_start", "window_end"),
    measures=("failed_count",),
    event_time="event_time",
    state=StateBound(watermark="10 minutes"),
    output_mode="append",
    build=build,
    reads=READS,
    params={"window": "24 hours", "slide": "5 seconds"},
    # a change point at window_end sums the FAILED events of the day before it
    recon_partition="to_date(window_end)",
    recon_read_back="24 hours 5 seconds",
    thresholds=StateThresholds(warn_rows=200_000, critical_rows=1_000_000),
    recon_warn_share=0.9,  # a change point stays open for a day: most recent ones are open
)
