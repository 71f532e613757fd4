"""Event schemas, declared once.

Each stream is a list of fields with their Spark type. The generator writes these fields, the
bronze reader parses and validates them, tests build expectations from them, and a test checks
the dbt source yml against them. Every field is required: a line missing one is quarantined.

Declare your own stream in a module of a job folder (``TIDEMARK_JOBS_PATH``)::

    from pyspark.sql import types as T
    from streaming_jobs.schemas import Field, StreamSchema

    STREAM = StreamSchema(
        name="readings",                      # landing/readings/, lake/bronze/readings
        event_time="read_at",                 # a TimestampType field: windows, watermarks
        key=("sensor_id", "read_at"),         # the dedup key: a column, several, or None
        fields=(
            Field("sensor_id", T.StringType(), "the sensor"),
            Field("read_at", T.TimestampType(), "when it was read (UTC)"),
            Field("celsius", T.DoubleType(), "the reading"),
        ),
    )
"""

from __future__ import annotations

import math

import re
from dataclasses import dataclass

from pyspark.sql import types as T

NAME = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclass(frozen=True)
class Field:
    """One field of a stream's JSON lines: its name, Spark type and meaning (the dbt docs)."""

    name: str
    dtype: T.DataType
    description: str


ACTIONS = ("warn", "quarantine", "fail")


@dataclass(frozen=True)
class Expectation:
    """A rule every row should satisfy: a Spark SQL predicate over the row's columns, and what
    happens to a row for which it is false or null (the row "fails" it).

    - ``warn``: the row is kept; the failures are counted per batch (``ops/expectations``, the
      Dagster check ``expect_<name>`` turns yellow);
    - ``quarantine`` (streams only): the row goes to ``quarantine/<stream>`` with the reason
      ``expectation <name> failed: <rule>`` instead of bronze, and is counted;
    - ``fail``: the batch is not committed; the query stops with the rule and a failing row in
      its error. Fix the source (or the rule) and run again: nothing was written.

    Streams declare them in ``StreamSchema(expectations=...)``; a job's output in
    ``JobSpec(expectations=...)`` or a SQL job's header (``-- expect <name>: <rule> on
    violation fail``), with ``warn`` or ``fail`` (a job's rows are not quarantined: the
    reconciliation would count each as a difference).
    """

    name: str
    rule: str
    action: str = "warn"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not NAME.match(self.name):
            raise ValueError(
                f"expectation {self.name!r}: a name is lower case letters, digits "
                "and _, starting with a letter"
            )
        if not isinstance(self.rule, str) or not self.rule.strip():
            raise ValueError(
                f"expectation {self.name}: write its rule, a SQL predicate such as 'amount >= 0'"
            )
        if self.action not in ACTIONS:
            raise ValueError(
                f"expectation {self.name}: action is one of {', '.join(ACTIONS)}, "
                f"got {self.action!r}"
            )

    @property
    def reason(self) -> str:
        """The quarantine reason of a row that fails it."""
        return f"expectation {self.name} failed: {self.rule}"


def check_expectations(where: str, expectations, actions: tuple[str, ...] = ACTIONS) -> tuple:
    """Validate a declared list: Expectation objects, distinct names, allowed actions."""
    expectations = tuple(expectations or ())
    for e in expectations:
        if not isinstance(e, Expectation):
            raise ValueError(
                f"{where}: expectations are Expectation(name, rule, action), got {e!r}"
            )
        if e.action not in actions:
            raise ValueError(
                f"{where}: expectation {e.name} has action {e.action!r}; here the "
                f"action is one of {', '.join(actions)}"
            )
    names = [e.name for e in expectations]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"{where}: expectation {', '.join(twice)} declared twice")
    return expectations


# Spark's VARIANT holds at most 16 MiB; its parser, and the check that a line holds one value
# (which wraps the line in one more level), nest at most 1,000 levels deep
MAX_LINE_BYTES = 16 * 1024 * 1024
MAX_DEPTH = 999


@dataclass(frozen=True)
class StreamSchema:
    """A stream: JSON objects with these fields, from a landing folder of JSON lines or a Kafka
    topic (``source``).

    ``key`` is the stream's deduplication key: the columns that make two lines the same event.

    - one column (``"event_id"``) or several (``("sensor_id", "read_at")``): lines with equal
      key columns are copies of one event; the first copy counts, later ones are dropped;
    - ``None``: every field together is the identity: only exact duplicate lines are dropped,
      so two real events with identical fields also count once. Declare a key if the source
      has one.

    Every layer uses it: the jobs' dedup (SQL jobs, and Python jobs through `dedup_stream`),
    the batch recomputation and the tests dbt runs on the staging model.
    """

    name: str
    fields: tuple[Field, ...]
    event_time: str
    key: str | tuple[str, ...] | None = None
    # How far ahead of its ingest time an event may be: a line dated later is quarantined (one
    # far-future event would move every watermark past all real data). None: no bound.
    max_ahead: str | None = "1 day"
    # The longest line and the deepest nesting a line may have; a line past either is
    # quarantined with that reason. Spark's JSON values hold at most 16 MiB and nest at most
    # MAX_DEPTH deep, the bounds of both settings (a lower max_depth is checked on every line).
    max_line_bytes: int = 8 * 1024 * 1024
    max_depth: int = 999
    # The largest magnitude a fractional field (double, float, decimal) may hold; a line past it
    # is quarantined. Reconciliation recomputes sums exactly, as decimal(38, 9) (an
    # incremental run adds rows in another order than a backfill): 1e18 leaves room for ten
    # billion such values in one sum. None: no bound (a larger value then fails its recon).
    max_abs: float | None = 1e18
    # Rules on the typed rows, checked after the schema (`Expectation`): warn, quarantine, fail.
    expectations: tuple[Expectation, ...] = ()
    # Where its events come from: "landing" (JSON lines files) or "kafka" (one JSON object per
    # record value); None: the deployment's default, TIDEMARK_SOURCE. `topic`: its Kafka topic
    # (default <TIDEMARK_KAFKA_TOPIC_PREFIX><name>).
    source: str | None = None
    topic: str | None = None

    def __post_init__(self) -> None:
        from streaming_jobs.intervals import interval_seconds

        where = f"stream {self.name!r}"
        if self.source not in (None, "landing", "kafka"):
            raise ValueError(
                f"{where}: source {self.source!r} is 'landing', 'kafka' or None "
                "(TIDEMARK_SOURCE decides)"
            )
        if self.topic is not None and not re.match(r"^[A-Za-z0-9._-]{1,249}$", self.topic):
            raise ValueError(
                f"{where}: topic {self.topic!r} is not a Kafka topic name (letters, "
                "digits, '.', '_', '-', at most 249)"
            )
        if self.max_ahead is not None:
            try:
                seconds = interval_seconds(self.max_ahead)
            except ValueError:
                seconds = None
            if seconds is None or seconds < 0:
                raise ValueError(
                    f"{where}: max_ahead {self.max_ahead!r} is not an interval such "
                    "as '1 day' or '2 hours' (or None for no bound)"
                )
        if self.max_abs is not None and (
            isinstance(self.max_abs, bool)
            or not isinstance(self.max_abs, (int, float))
            or not math.isfinite(self.max_abs)
            or self.max_abs <= 0
        ):
            raise ValueError(
                f"{where}: max_abs {self.max_abs!r} is a finite number above 0, "
                "or None for no bound"
            )
        for setting, value, bound in (
            ("max_line_bytes", self.max_line_bytes, MAX_LINE_BYTES),
            ("max_depth", self.max_depth, MAX_DEPTH),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= bound:
                raise ValueError(
                    f"{where}: {setting} {value!r} is a whole number from 1 to "
                    f"{bound:,} (the most Spark's JSON values hold)"
                )
        if not isinstance(self.name, str) or not NAME.match(self.name):
            raise ValueError(
                f"{where}: a stream name is lower case letters, digits and _, "
                "starting with a letter (it names folders, tables and dbt models)"
            )
        names = [f.name for f in self.fields]
        if not names:
            raise ValueError(f"{where}: declare its fields (Field(name, spark_type, description))")
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"{where}: field {', '.join(twice)} declared twice")
        if self.event_time not in names:
            raise ValueError(
                f"{where}: event_time {self.event_time!r} is not one of its fields "
                f"({', '.join(names)})"
            )
        if not isinstance(self.field(self.event_time).dtype, T.TimestampType):
            raise ValueError(
                f"{where}: event_time {self.event_time!r} must be a T.TimestampType() field"
            )
        key = (self.key,) if isinstance(self.key, str) else tuple(self.key or ())
        unknown = [k for k in key if k not in names]
        if unknown or len(set(key)) != len(key):
            raise ValueError(
                f"{where}: key {', '.join(unknown or key)} is not a list of distinct "
                f"fields ({', '.join(names)}); name its dedup columns, or None"
            )
        object.__setattr__(self, "key", key or None)
        object.__setattr__(self, "expectations", check_expectations(where, self.expectations))

    def field(self, name: str) -> Field:
        return next(f for f in self.fields if f.name == name)

    @property
    def dedup_key(self) -> tuple[str, ...]:
        """The columns two copies of one event share: the key, or every field without one."""
        return self.key or tuple(self.field_names)

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
