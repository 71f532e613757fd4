"""The queries `compare.py` runs on every engine, defined once (standard library only: the Flink
and DuckDB runners import it from the benchmark's own virtual environment, without Spark).

Each query is one of tidemark's jobs, as the job registry declares it (``job``, ``params``
overriding the declared parameters), and every engine computes the same answer from the same
generated JSON lines:

- ``tumbling``: ``zone_revenue_hourly``, rides per pickup zone per 1-hour window: trips,
  revenue (sum of ``total_amount``), average fare;
- ``sliding_60s``: ``failed_txn_velocity`` at 60 s / 5 s: FAILED transactions per user per
  window (one row per non-empty window; tidemark's change points are expanded to windows);
- ``session``: ``user_sessions``, clicks per user split by a 5-minute gap: clicks, spend;
- ``interval_join``: ``order_payment_match``, orders full-outer-joined with their payments
  within 20 minutes: paid, unpaid, unknown_order;
- ``sliding_24h``: ``failed_txn_velocity`` as declared, 24 h / 5 s, as change points of each
  user's count (emitting every window is 17,280 rows per event: no engine here can).

Every engine deduplicates on ``event_id`` first and waits 10 minutes for late events (the
watermark). Answers are compared on what is final everywhere: windows and sessions that end at
or before the final watermark (the latest event time less 10 minutes, the least over the
query's streams), and join rows whose order (or payment) time is at least 30 minutes before it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

WATERMARK_MS = 600_000
JOIN_MARGIN_MS = 1_800_000  # the 20-minute bound and 10 more: a join row is final everywhere
SESSION_GAP_MS = 300_000


@dataclass(frozen=True)
class Query:
    name: str
    job: str
    streams: tuple[str, ...]
    keys: tuple[str, ...]  # the answer's key columns (times as epoch milliseconds)
    measures: tuple[str, ...]
    params: dict = field(default_factory=dict)
    closed_by: str = "window_end"  # the column compared with the final watermark
    margin_ms: int = 0
    engines: tuple[str, ...] = ("tidemark", "spark", "flink", "duckdb")


QUERIES = {
    q.name: q
    for q in (
        Query(
            "tumbling",
            "zone_revenue_hourly",
            ("rides",),
            ("pickup_zone", "window_start", "window_end"),
            ("trips", "revenue", "avg_fare"),
        ),
        Query(
            "sliding_60s",
            "failed_txn_velocity",
            ("transactions",),
            ("user_id", "window_start", "window_end"),
            ("failed_count",),
            params={"window": "60 seconds", "slide": "5 seconds"},
        ),
        Query(
            "session",
            "user_sessions",
            ("clicks",),
            ("user_id", "window_start", "window_end"),
            ("clicks", "spend"),
        ),
        Query(
            "interval_join",
            "order_payment_match",
            ("orders", "payments"),
            ("order_id", "payment_id", "status"),
            ("order_amount", "payment_amount"),
            closed_by="anchor",
            margin_ms=JOIN_MARGIN_MS,
        ),
        Query(
            "sliding_24h",
            "failed_txn_velocity",
            ("transactions",),
            ("user_id", "window_end"),
            ("failed_count",),
            engines=("tidemark", "duckdb"),
        ),
    )
}

# The columns each stream's JSON lines carry (all generated as valid values here)
COLUMNS = {
    "rides": {
        "event_id": "VARCHAR",
        "ride_id": "VARCHAR",
        "pickup_zone": "VARCHAR",
        "dropoff_zone": "VARCHAR",
        "passengers": "BIGINT",
        "fare": "DOUBLE",
        "total_amount": "DOUBLE",
        "pickup_time": "VARCHAR",
    },
    "transactions": {
        "event_id": "VARCHAR",
        "user_id": "VARCHAR",
        "card_id": "VARCHAR",
        "merchant": "VARCHAR",
        "amount": "DOUBLE",
        "currency": "VARCHAR",
        "status": "VARCHAR",
        "event_time": "VARCHAR",
    },
    "clicks": {
        "event_id": "VARCHAR",
        "user_id": "VARCHAR",
        "page": "VARCHAR",
        "action": "VARCHAR",
        "amount": "DOUBLE",
        "event_time": "VARCHAR",
    },
    "orders": {
        "event_id": "VARCHAR",
        "order_id": "VARCHAR",
        "user_id": "VARCHAR",
        "amount": "DOUBLE",
        "order_time": "VARCHAR",
    },
    "payments": {
        "event_id": "VARCHAR",
        "payment_id": "VARCHAR",
        "order_id": "VARCHAR",
        "amount": "DOUBLE",
        "payment_time": "VARCHAR",
    },
}
EVENT_TIME = {
    "rides": "pickup_time",
    "transactions": "event_time",
    "clicks": "event_time",
    "orders": "order_time",
    "payments": "payment_time",
}
