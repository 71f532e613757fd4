"""Raw lines -> typed rows or a reason, on hand-written lines."""

from __future__ import annotations

from datetime import datetime

from pyspark.testing import assertDataFrameEqual

from streaming_jobs.schemas import RIDES, TRANSACTIONS
from streaming_jobs.core.validation import line_parser, parse_lines

GOOD = (
    '{"event_id":"e1","user_id":"u1","card_id":"c1","merchant":"m","amount":12.5,'
    '"currency":"USD","status":"FAILED","event_time":"2026-01-01T00:00:01.250Z"}'
)


def test_each_line_gets_its_fields_or_its_reason(spark):
    lines = [
        GOOD,
        GOOD.replace("12.5", '"twelve"'),
        GOOD.replace('"2026-01-01T00:00:01.250Z"', '"yesterday"'),
        GOOD.replace(',"merchant":"m"', ""),
        GOOD[:40],
        "[1, 2]",
        "",
    ]
    df = spark.createDataFrame([(line,) for line in lines], "_line string")
    result = parse_lines(df, TRANSACTIONS).select(
        "_line", "event_id", "amount", "event_time", "_reason"
    )
    expected = spark.createDataFrame(
        [
            (lines[0], "e1", 12.5, datetime(2026, 1, 1, 0, 0, 1, 250000), None),
            (
                lines[1],
                "e1",
                None,
                datetime(2026, 1, 1, 0, 0, 1, 250000),
                "amount is a JSON string, not a number",
            ),
            (
                lines[2],
                "e1",
                12.5,
                None,
                "event_time has no date (a timestamp is an ISO-8601 date and time)",
            ),
            (
                lines[3],
                "e1",
                12.5,
                datetime(2026, 1, 1, 0, 0, 1, 250000),
                "missing required field(s): merchant",
            ),
            (lines[4], None, None, None, "invalid JSON"),
            (lines[5], None, None, None, "not a JSON object"),
            (lines[6], None, None, None, "empty line"),
        ],
        "_line string, event_id string, amount double, event_time timestamp, _reason string",
    )
    assertDataFrameEqual(result, expected)


def test_a_streams_parser_is_built_once_and_serves_every_batch(spark):
    parser = line_parser(TRANSACTIONS)
    assert line_parser(TRANSACTIONS) is parser  # each bronze writer of the stream reuses it
    assert line_parser(RIDES) is not parser
    # one parser over two batches in turn: each gets its own lines' answers
    first = spark.createDataFrame([(GOOD,)], "_line string")
    second = spark.createDataFrame([(GOOD.replace("12.5", "true"),), ("{}",)], "_line string")
    assert [(r.amount, r._reason) for r in parser(first).collect()] == [(12.5, None)]
    assert sorted(r._reason for r in parser(second).collect()) == [
        "amount is a JSON boolean, not a number",
        "missing required field(s): event_id, user_id, card_id, merchant, amount, currency, "
        "status, event_time",
    ]


def reasons(spark, lines, schema=TRANSACTIONS) -> list:
    df = spark.createDataFrame([(line,) for line in lines], "_line string")
    return [r._reason for r in parse_lines(df, schema).select("_reason").collect()]


def test_lines_that_would_be_silently_altered_are_quarantined_with_a_precise_reason(spark):
    lines = [
        GOOD + '{"event_id":"e2"}',  # two objects on a line
        GOOD + " trailing text",  # text after the object
        GOOD + "]",  # a closing bracket after it: '[' line ']' alone read one value
        GOOD + "] trailing text",
        GOOD.replace('"m"', '"m]"') + ",0]",  # a ']' in a string, and ',0]' after the object
        GOOD.replace('"amount":12.5', '"amount":"12.5"'),  # a number written as text
        GOOD.replace('"amount":12.5', '"amount":"NaN"'),
        GOOD.replace('"amount":12.5', '"amount":"Infinity"'),
        GOOD.replace('"merchant":"m"', '"merchant":42'),  # a string field holding a number
        GOOD.replace('"merchant":"m"', '"merchant":{"name":"m"}'),
        GOOD.replace('"2026-01-01T00:00:01.250Z"', '"00:00:01"'),  # a time without its date
        GOOD.replace('"event_id":"e1"', '"event_id":"  "'),  # a blank key
        GOOD.replace('"event_id":"e1"', '"event_id":""'),
        GOOD.replace('"2026-01-01T00:00:01.250Z"', '"9999-12-31T00:00:00Z"'),  # far future
        GOOD.replace('"merchant":"m"', '"merchant":null'),  # null is missing
        GOOD,
        GOOD.replace('"m"', '"m]"') + "  ",  # a ']' inside a string, then spaces: good
        GOOD.replace('"user_id":"u1"', '"user_id":"u1","user_id":"u2"'),  # valid JSON, twice
        GOOD.replace('"merchant":"m"', '"merchant":{"n":"m","n":"o"}'),
        GOOD.replace('"event_id":"e1"', '"event_\\u0069d":"e1","event_id":"e2"'),  # escaped
    ]
    assert reasons(spark, lines) == [
        "more than one JSON value on the line",
        "more than one JSON value on the line",
        "more than one JSON value on the line",
        "more than one JSON value on the line",
        "more than one JSON value on the line",
        "amount is a JSON string, not a number",
        "amount is a JSON string, not a number",
        "amount is a JSON string, not a number",
        "merchant is a JSON bigint, not a string",
        "merchant is a JSON object, not a string",
        "event_time has no date (a timestamp is an ISO-8601 date and time)",
        "key event_id is blank",
        "key event_id is blank",
        "event_time 9999-12-31 00:00:00 is more than 1 day after its ingest time "
        "(the stream's max_ahead)",
        "missing required field(s): merchant",
        None,
        None,
        "duplicate key user_id (a key may appear once in an object)",
        "invalid JSON",  # a nested key twice: json_object_keys reads the top level only
        "duplicate key event_id (a key may appear once in an object)",
    ]


def test_the_future_bound_is_the_streams_setting(spark):
    from dataclasses import replace
    from datetime import timedelta

    soon = (datetime.utcnow() + timedelta(hours=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
    line = GOOD.replace("2026-01-01T00:00:01.250Z", soon)
    assert reasons(spark, [line]) == [None]  # within the default day
    strict = replace(TRANSACTIONS, max_ahead="1 hour")
    assert reasons(spark, [line], strict)[0].endswith(
        "is more than 1 hour after its ingest time (the stream's max_ahead)"
    )
    assert reasons(spark, [line], replace(TRANSACTIONS, max_ahead=None)) == [None]


def test_a_field_may_have_any_name_the_raw_line_column_included(spark):
    """A stream's field named `value` (the text reader's own column) used to make the
    projection ambiguous and stop the stream at its first batch."""
    from pyspark.sql import types as T

    from streaming_jobs.schemas import Field, StreamSchema

    schema = StreamSchema(
        name="meters",
        key="event_id",
        event_time="event_time",
        fields=(
            Field("event_id", T.StringType(), "id"),
            Field("value", T.DoubleType(), "reading"),
            Field("event_time", T.TimestampType(), "when"),
        ),
    )
    line = '{"event_id":"m1","value":2.5,"event_time":"2026-01-01T00:00:00Z"}'
    df = spark.createDataFrame([(line,)], "_line string")
    [row] = parse_lines(df, schema).select("_line", "event_id", "value", "_reason").collect()
    assert tuple(row) == (line, "m1", 2.5, None)


def test_size_and_depth_have_their_own_reasons_and_settings(spark):
    """A line past the parser's bounds used to read as "invalid JSON"; the reason now says
    which bound, and both bounds are the stream's settings."""
    from dataclasses import replace

    import pytest

    def nested(depth: int) -> str:
        # depth levels in all: the object, then depth - 1 arrays; brackets in strings do not count
        inner = "[" * (depth - 1) + "]" * (depth - 1)
        return GOOD.replace('"merchant":"m"', f'"merchant":"[[{{","deep":{inner}')

    long_line = GOOD.replace('"merchant":"m"', '"merchant":"' + "x" * 3000 + '"')
    lines = [nested(999), nested(1000), nested(5000), long_line]
    assert reasons(spark, lines) == [
        None,
        "nested deeper than 999 levels (the stream's max_depth)",
        "nested deeper than 999 levels (the stream's max_depth)",
        None,
    ]
    small = replace(TRANSACTIONS, max_line_bytes=2000, max_depth=10)
    assert reasons(spark, [nested(10), nested(11), long_line], small) == [
        None,
        "nested deeper than 10 levels (the stream's max_depth)",
        "line longer than 2,000 bytes (the stream's max_line_bytes)",
    ]
    for setting, value in (
        ("max_line_bytes", 0),
        ("max_line_bytes", 17 * 1024 * 1024),
        ("max_depth", 1000),
        ("max_depth", 2.5),
    ):
        with pytest.raises(
            ValueError, match=f"stream 'transactions': {setting} .* is a whole number from 1 to"
        ):
            replace(TRANSACTIONS, **{setting: value})


def test_a_key_of_invisible_characters_is_blank(spark):
    lines = [
        GOOD.replace('"event_id":"e1"', f'"event_id":"{k}"')
        for k in ("\\u00a0", "\\u200b\\u00a0", "\\u3000\\t", "\\ufeff", "\\u00a0e1")
    ]
    assert reasons(spark, lines) == ["key event_id is blank"] * 4 + [None]
