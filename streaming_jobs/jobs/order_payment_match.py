"""order_payment_match: orders matched with their payments within a time bound (stream-stream join).

A payment pays an order when it names the order and ``|payment_time - order_time| <= within``
(payments can be stamped a little before their order: the two are clocked by different
systems). Full outer join, one row per outcome:

- ``paid``: an order and one of its payments (an order paid twice has two rows), emitted as
  soon as both sides have arrived;
- ``unpaid``: an order with no payment within the bound, emitted once the watermark passes
  ``order_time + within`` (no payment can match it any more);
- ``unknown_order``: a payment naming no order within the bound, emitted once the watermark
  passes ``payment_time + within``.

Key: (order_id, payment_id), payment_id null for unpaid orders. Append mode, exactly-once
through the Delta sink.

State is bounded by the watermark on both sides (10 minutes, the global watermark is the
minimum of the two): an order is dropped from the join's state once no payment ahead of the
watermark can match it (its time + ``within`` is behind the watermark), a payment likewise.
Each side is deduplicated first (exact duplicates, same ``event_id``), and those operators
drop and count the events behind the watermark, so the job's rows-dropped-by-watermark counts
late orders plus late payments, one per line.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from streaming_jobs.schemas import ORDERS, PAYMENTS
from streaming_jobs.stateful.dedup import dedup_stream
from streaming_jobs.spec import JobSpec, StateBound, StateThresholds


def build(orders: DataFrame, payments: DataFrame, *, within: str, watermark: str) -> DataFrame:
    o = dedup_stream(orders, ORDERS, watermark).select(
        F.col("order_id").alias("o_order_id"),
        "user_id",
        F.col("amount").alias("order_amount"),
        "order_time",
    )
    p = dedup_stream(payments, PAYMENTS, watermark).select(
        F.col("order_id").alias("p_order_id"),
        "payment_id",
        F.col("amount").alias("payment_amount"),
        "payment_time",
    )
    bound = F.expr(f"interval {within}")
    matched = o.join(
        p,
        (F.col("o_order_id") == F.col("p_order_id"))
        & (F.col("payment_time") >= F.col("order_time") - bound)
        & (F.col("payment_time") <= F.col("order_time") + bound),
        "full_outer",
    )
    return matched.select(
        F.coalesce("o_order_id", "p_order_id").alias("order_id"),
        "payment_id",
        "user_id",
        "order_time",
        "payment_time",
        "order_amount",
        "payment_amount",
        F.when(F.col("o_order_id").isNull(), "unknown_order")
        .when(F.col("payment_id").isNull(), "unpaid")
        .otherwise("paid")
        .alias("status"),
    )


SPEC = JobSpec(
    name="order_payment_match",
    description="Orders joined with their payments within a time bound: paid, unpaid, "
    "unknown_order (stream-stream full outer join)",
    source="orders",
    joins=("payments",),
    keys=("order_id", "payment_id"),
    measures=("order_amount", "payment_amount"),
    event_time="order_time",
    state=StateBound(watermark="10 minutes"),
    output_mode="append",
    build=build,
    params={"within": "20 minutes"},
    # an order and its payment are at most the bound apart
    recon_partition="to_date(coalesce(order_time, payment_time))",
    recon_lookback="20 minutes",
    recon_read_back="20 minutes",
    thresholds=StateThresholds(warn_rows=200_000, critical_rows=1_000_000),
    tolerance=1e-6,
)
