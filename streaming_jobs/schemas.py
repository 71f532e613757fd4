"""Event schemas, declared once.

Each stream is a list of fields with their Spark type. The generator writes these fields, the
bronze reader parses and validates them, tests build expectations from them, and a test checks
the dbt source yml against them. Every field is required: a line missing one is quarantined.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import types as T


@dataclass(frozen=True)
class Field:
    name: str
    dtype: T.DataType
    description: str


@dataclass(frozen=True)
class StreamSchema:
    name: str
    fields: tuple[Field, ...]
    key: str  # unique event id, used for deduplication
    event_time: str

    @property
    def struct(self) -> T.StructType:
        return T.StructType([T.StructField(f.name, f.dtype, True) for f in self.fields])

    @property
    def raw_struct(self) -> T.StructType:
        """Every field as a string: parse first, then type-check each field with a reason."""
        return T.StructType([T.StructField(f.name, T.StringType(), True) for f in self.fields])

    @property
    def field_names(self) -> list[str]:
        return [f.name for f in self.fields]


TRANSACTIONS = StreamSchema(
    name="transactions",
    key="event_id",
    event_time="event_time",
    fields=(
        Field("event_id", T.StringType(), "unique id of the event; duplicates repeat it"),
        Field("user_id", T.StringType(), "the paying user"),
        Field("card_id", T.StringType(), "the card used"),
        Field("merchant", T.StringType(), "merchant name"),
        Field("amount", T.DoubleType(), "amount in the currency's units"),
        Field("currency", T.StringType(), "ISO 4217 code"),
        Field("status", T.StringType(), "APPROVED, DECLINED or FAILED"),
        Field("event_time", T.TimestampType(), "when the transaction happened (UTC)"),
    ),
)

RIDES = StreamSchema(
    name="rides",
    key="event_id",
    event_time="pickup_time",
    fields=(
        Field("event_id", T.StringType(), "unique id of the event; duplicates repeat it"),
        Field("ride_id", T.StringType(), "the ride"),
        Field("pickup_zone", T.StringType(), "zone where the ride started"),
        Field("dropoff_zone", T.StringType(), "zone where the ride ended"),
        Field("passengers", T.IntegerType(), "number of passengers"),
        Field("fare", T.DoubleType(), "metered fare"),
        Field("total_amount", T.DoubleType(), "fare plus tip, tolls and surcharges"),
        Field("pickup_time", T.TimestampType(), "when the ride started (UTC)"),
    ),
)

ORDERS = StreamSchema(
    name="orders",
    key="event_id",
    event_time="order_time",
    fields=(
        Field("event_id", T.StringType(), "unique id of the event; duplicates repeat it"),
        Field("order_id", T.StringType(), "the order"),
        Field("user_id", T.StringType(), "who ordered"),
        Field("amount", T.DoubleType(), "order amount"),
        Field("order_time", T.TimestampType(), "when the order was placed (UTC)"),
    ),
)

PAYMENTS = StreamSchema(
    name="payments",
    key="event_id",
    event_time="payment_time",
    fields=(
        Field("event_id", T.StringType(), "unique id of the event; duplicates repeat it"),
        Field("payment_id", T.StringType(), "the payment"),
        Field("order_id", T.StringType(), "the order it pays (may be unknown)"),
        Field("amount", T.DoubleType(), "amount paid"),
        Field("payment_time", T.TimestampType(), "when the payment was made (UTC)"),
    ),
)

CLICKS = StreamSchema(
    name="clicks",
    key="event_id",
    event_time="event_time",
    fields=(
        Field("event_id", T.StringType(), "unique id of the event; duplicates repeat it"),
        Field("user_id", T.StringType(), "who clicked"),
        Field("page", T.StringType(), "page path"),
        Field("action", T.StringType(), "view, click, add_to_cart or purchase"),
        Field("amount", T.DoubleType(), "spend of the action (0 unless purchase)"),
        Field("event_time", T.TimestampType(), "when the click happened (UTC)"),
    ),
)

STREAMS: dict[str, StreamSchema] = {
    s.name: s for s in (TRANSACTIONS, RIDES, ORDERS, PAYMENTS, CLICKS)
}
