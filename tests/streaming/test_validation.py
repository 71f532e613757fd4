"""Raw lines -> typed rows or a reason, on hand-written lines."""

from __future__ import annotations

from datetime import datetime

from pyspark.testing import assertDataFrameEqual

from streaming_jobs.schemas import TRANSACTIONS
from streaming_jobs.validation import parse_lines

GOOD = ('{"event_id":"e1","user_id":"u1","card_id":"c1","merchant":"m","amount":12.5,'
        '"currency":"USD","status":"FAILED","event_time":"2026-01-01T00:00:01.250Z"}')


def test_each_line_gets_its_fields_or_its_reason(spark):
    lines = [
        GOOD,
        GOOD.replace('12.5', '"twelve"'),
        GOOD.replace('"2026-01-01T00:00:01.250Z"', '"yesterday"'),
        GOOD.replace(',"merchant":"m"', ""),
        GOOD[:40],
        "[1, 2]",
        "",
    ]
    df = spark.createDataFrame([(line,) for line in lines], "value string")
    result = parse_lines(df, TRANSACTIONS).select("value", "event_id", "amount", "event_time", "_reason")
    expected = spark.createDataFrame([
        (lines[0], "e1", 12.5, datetime(2026, 1, 1, 0, 0, 1, 250000), None),
        (lines[1], "e1", None, datetime(2026, 1, 1, 0, 0, 1, 250000), "amount is not a valid double"),
        (lines[2], "e1", 12.5, None, "event_time is not a valid timestamp"),
        (lines[3], "e1", 12.5, datetime(2026, 1, 1, 0, 0, 1, 250000), "missing required field(s): merchant"),
        (lines[4], None, None, None, "invalid JSON"),
        (lines[5], None, None, None, "not a JSON object"),
        (lines[6], None, None, None, "empty line"),
    ], "value string, event_id string, amount double, event_time timestamp, _reason string")
    assertDataFrameEqual(result, expected)
