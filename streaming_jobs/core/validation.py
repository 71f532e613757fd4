"""Parse raw JSON lines into typed rows, or give each bad line its reason.

`parse_lines` is pure: a DataFrame of raw lines in, the same rows out with the typed fields
and a ``_reason`` column that is null for a good row. Bronze keeps the good rows, quarantine
keeps the raw line and the reason, so every line lands in exactly one of the two.

Strict by default. The first rule a line breaks is its reason (`REASONS` lists them in
order):

- the line is UTF-8 text (quarantine keeps every line's exact bytes in ``raw_bytes``);
- it is at most ``max_line_bytes`` long and nests at most ``max_depth`` deep (the stream's
  settings; Spark's own bounds are their limits);
- the line is one JSON object and nothing else (no second value, no text after it);
- every field is present and not null;
- each field has its JSON type: a string field a JSON string (not a number, object or
  boolean written as text), a number field a JSON number (not ``"12"``, ``"NaN"`` or
  ``"Infinity"`` in quotes), a timestamp an ISO-8601 string with its date;
- the value converts to the field's type (a number that fits, a timestamp that exists);
- a fractional number is below ``max_abs`` in magnitude (the stream's setting, default 1e18:
  reconciliation sums them exactly, as ``decimal(38, 9)``);
- the stream's key columns are not blank;
- the event time is at most ``max_ahead`` (the stream's setting, default 1 day) after the
  line's ingest time: one far-future event would otherwise move every job's watermark past all
  real data, and every later event would be dropped as late.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from streaming_jobs.intervals import interval_seconds
from streaming_jobs.schemas import MAX_DEPTH, StreamSchema

REASONS = (
    "not valid UTF-8 (its bytes are kept in raw_bytes)",
    "empty line",
    "line longer than <max_line_bytes> bytes (the stream's max_line_bytes)",
    "nested deeper than <max_depth> levels (the stream's max_depth)",
    "duplicate key <key> (a key may appear once in an object)",
    "invalid JSON",
    "not a JSON object",
    "more than one JSON value on the line",
    "missing required field(s): <fields>",
    "<field> is a JSON <type>, not a <string|number|boolean|timestamp string>",
    "<field> has no date (a timestamp is an ISO-8601 date and time)",
    "<field> is not a valid <type>",
    "<field> <value> is beyond ±<max_abs> (the stream's max_abs)",
    "key <field> is blank",
    "<event time> is more than <max_ahead> after its ingest time",
)
NUMERIC = (
    T.ByteType,
    T.ShortType,
    T.IntegerType,
    T.LongType,
    T.FloatType,
    T.DoubleType,
    T.DecimalType,
)
JSON_NUMBERS = ("TINYINT", "SMALLINT", "INT", "BIGINT", "FLOAT", "DOUBLE", "DECIMAL")
ISO_DATE = r"^\d{4}-\d{2}-\d{2}([Tt ]|$)"


def _typed(raw: Column, dtype: T.DataType) -> Column:
    if isinstance(dtype, T.StringType):
        return raw
    if isinstance(dtype, T.TimestampType):
        return F.try_to_timestamp(raw)
    return raw.try_cast(dtype)


def _json_type(variant: Column, name: str) -> Column:
    """The JSON type of one field as Spark's variant names it: STRING, BIGINT, DOUBLE,
    DECIMAL(p,s), BOOLEAN, OBJECT<...>, ARRAY<...>, VOID (null)."""
    return F.schema_of_variant(F.variant_get(variant, f"$.{name}", "variant"))


def _wrong_json_type(name: str, dtype: T.DataType, json_type: Column) -> Column:
    """The reason when a present field has the wrong JSON type, else null."""
    if isinstance(dtype, (T.StringType, T.TimestampType)):
        wanted, ok = (
            "timestamp string" if isinstance(dtype, T.TimestampType) else "string",
            json_type == "STRING",
        )
    elif isinstance(dtype, NUMERIC):
        wanted = "number"
        ok = F.split(json_type, r"\(")[0].isin(*JSON_NUMBERS)
    elif isinstance(dtype, T.BooleanType):
        wanted, ok = "boolean", json_type == "BOOLEAN"
    else:
        return F.lit(None).cast("string")
    kind = F.lower(F.regexp_replace(json_type, r"[<(].*$", ""))
    return F.when(
        (json_type != "VOID") & ~ok,
        F.concat(F.lit(f"{name} is a JSON "), kind, F.lit(f", not a {wanted}")),
    )


def _all_typed_pattern(schema: StreamSchema) -> str | None:
    """A regex matching the JSON type (`schema_of_variant`) of an object that holds exactly
    the stream's fields, each of its JSON type: the common line. Such a line needs no per-field
    type check (one type string per line instead of one per field: the checks were 40 % of the
    parse). None when a field's name or type has no simple pattern (the per-field checks run)."""
    import re

    parts = []
    for f in sorted(schema.fields, key=lambda f: f.name.encode("utf-8")):  # variant's key order
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", f.name):
            return None
        if isinstance(f.dtype, (T.StringType, T.TimestampType)):
            kind = "STRING"
        elif isinstance(f.dtype, NUMERIC):
            kind = r"(?:TINYINT|SMALLINT|INT|BIGINT|FLOAT|DOUBLE|DECIMAL\(\d+,\d+\))"
        elif isinstance(f.dtype, T.BooleanType):
            kind = "BOOLEAN"
        else:
            return None
        parts.append(f"{f.name}: {kind}")
    return "^OBJECT<" + ", ".join(parts) + ">$"


# The raw line's column: underscored, as every column tidemark adds, so that a stream's own
# field can be called anything a JSON key can (a field named "value", the text reader's own
# column name, made the projection ambiguous and stopped the stream)
LINE = "_line"


# Blank: only white space, separators (no-break space...) and invisible format characters
# (zero-width space...): a key like that is empty to a reader, and dedup would merge them all
BLANK = r"^[\s\p{Z}\p{Cf}]*$"


def nesting_depth(line: Column) -> Column:
    """How deep the line's arrays and objects nest (brackets inside strings do not count)."""
    outside_strings = F.regexp_replace(line, r'"(?:[^"\\]++|\\.)*+"', "")
    brackets = F.split(F.regexp_replace(outside_strings, r"[^\[\]{}]", ""), "")

    def step(acc, c):
        depth = acc["d"] + F.when(c.isin("[", "{"), 1).otherwise(-1)
        return F.struct(depth.alias("d"), F.greatest(acc["m"], depth).alias("m"))

    return F.aggregate(
        brackets, F.struct(F.lit(0).alias("d"), F.lit(0).alias("m")), step, lambda acc: acc["m"]
    )


def parse_lines(lines: DataFrame, schema: StreamSchema, line_col: str = LINE) -> DataFrame:
    """Add the typed fields of ``schema`` and ``_reason`` (null when the line is good)."""
    return line_parser(schema, line_col)(lines)


# per (stream, line column): the JVM gateway its expressions live in, and the parser
_PARSERS: dict[tuple[StreamSchema, str], tuple[object, LineParser]] = {}


def line_parser(schema: StreamSchema, line_col: str = LINE) -> LineParser:
    """The stream's `LineParser`, built once per process: every incremental run of a stream
    builds a bronze writer, and building the parser's expressions was most of its cost (a
    writer took 0.42 s, 0.16 s with the parser kept; one session, 2026-12-02). Built again for
    a new JVM (its gateway), or for a stream that cannot be a key (a field unhashable)."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    try:
        known = _PARSERS.get((schema, line_col))
    except TypeError:
        return LineParser(schema, line_col)
    if known is None or known[0] is not gateway:
        known = (gateway, LineParser(schema, line_col))
        _PARSERS[(schema, line_col)] = known
    return known[1]


class LineParser:
    """`parse_lines` for one stream, its expressions built once.

    Building them costs about 0.1 s of calls into the JVM (a few hundred expressions for a
    stream of ten fields), which a micro-batch of a handful of lines would otherwise pay each
    time. The expressions name columns only, so they apply to any batch of lines."""

    def __init__(self, schema: StreamSchema, line_col: str = LINE) -> None:
        self.line = F.col(line_col)
        self.raw = F.from_json(self.line, schema.raw_struct)
        self.variant = F.try_parse_json(self.line)
        self.typed, self.reason = _fields_and_reason(schema, self.line)

    def __call__(self, lines: DataFrame) -> DataFrame:
        parsed = lines.withColumns({"_raw": self.raw, "_variant": self.variant})
        return (
            parsed.select("*", *self.typed)
            .withColumn("_reason", self.reason)
            .drop("_raw", "_variant")
        )


def _fields_and_reason(schema: StreamSchema, line: Column) -> tuple[list[Column], Column]:
    """(the typed fields, the reason) over the columns ``_raw`` (``from_json``) and
    ``_variant`` (``try_parse_json``), and the typed fields for the rules that read them."""
    # '[' line ']' is a one-element array when the line holds one JSON value, and nothing more
    # but a ']' and what follows it (the parser stops at the array's end): '[' line ',0]' is
    # then a two-element array only if the line has nothing after its value. That second parse
    # runs only for a line holding a ']' at all.
    one_value = F.json_array_length(F.concat(F.lit("["), line, F.lit("]")))
    closed = F.json_array_length(F.concat(F.lit("["), line, F.lit(",0]")))
    one_value = F.when(F.instr(line, "]") == 0, one_value).when(closed == 2, one_value)
    typed = [_typed(F.col("_raw")[f.name], f.dtype).alias(f.name) for f in schema.fields]
    missing = [F.when(F.col("_raw")[f.name].isNull(), F.lit(f.name)) for f in schema.fields]
    json_types = [
        _wrong_json_type(f.name, f.dtype, _json_type(F.col("_variant"), f.name))
        for f in schema.fields
    ]
    no_date = [
        F.when(
            ~F.col("_raw")[f.name].rlike(ISO_DATE),
            F.lit(f"{f.name} has no date (a timestamp is an ISO-8601 date and time)"),
        )
        for f in schema.fields
        if isinstance(f.dtype, T.TimestampType)
    ]
    bad_type = [
        F.when(
            F.col("_raw")[f.name].isNotNull() & F.col(f.name).isNull(),
            F.lit(f"{f.name} is not a valid {f.dtype.simpleString()}"),
        )
        for f in schema.fields
    ]
    fractional = (T.FloatType, T.DoubleType, T.DecimalType)
    too_large = (
        []
        if schema.max_abs is None
        else [
            F.when(
                ~(F.abs(F.col(f.name).cast("double")) < schema.max_abs),  # NaN and infinity too
                F.concat(
                    F.lit(f"{f.name} "),
                    F.col(f.name).cast("string"),
                    F.lit(f" is beyond ±{schema.max_abs:g} (the stream's max_abs)"),
                ),
            )
            for f in schema.fields
            if isinstance(f.dtype, fractional)
        ]
    )
    blank_key = [
        F.when(F.col(k).rlike(BLANK), F.lit(f"key {k} is blank"))
        for k in schema.key or ()
        if isinstance(schema.field(k).dtype, T.StringType)
    ]
    missing_list = F.concat_ws(", ", *missing)
    # the object's keys that appear more than once, for a line the variant refused: its parser
    # refuses a duplicate key, where json_object_keys reads the keys as they are
    keys = F.json_object_keys(line)
    twice = F.array_distinct(
        F.filter(keys, lambda k: F.size(F.filter(keys, lambda other: other == k)) > 1)
    )
    reason = (
        # Spark's text source keeps a line's bytes as they are; shown as text, bytes that are
        # not UTF-8 would become U+FFFD and the line would be parsed altered
        F.when(~F.is_valid_utf8(line), F.lit(REASONS[0]))
        .when(line.rlike(r"^\s*$"), F.lit("empty line"))  # spaces, tabs: nothing
        .when(
            F.octet_length(line) > schema.max_line_bytes,
            F.lit(
                f"line longer than {schema.max_line_bytes:,} bytes (the stream's max_line_bytes)"
            ),
        )
        # counted only where it can matter: a line the parser refused, unless the stream
        # asks for less than the parser's own bound
        .when(
            (F.col("_variant").isNull() | one_value.isNull() | F.lit(schema.max_depth < MAX_DEPTH))
            & (nesting_depth(line) > schema.max_depth),
            F.lit(f"nested deeper than {schema.max_depth:,} levels (the stream's max_depth)"),
        )
        # valid JSON all the same (a key SHOULD be unique, RFC 8259), but which copy counts is
        # the reader's choice (Spark's own parsers took the last): refused, and said plainly.
        # (A key twice in a nested object stays 'invalid JSON': json_object_keys reads the top
        # level only, and accepts lines the variant refuses for other reasons, a raw CR in a
        # string among them)
        .when(
            F.col("_variant").isNull() & (F.size(twice) > 0),
            F.concat(
                F.lit("duplicate key "),
                twice[0],
                F.lit(" (a key may appear once in an object)"),
            ),
        )
        .when(F.col("_variant").isNull(), F.lit("invalid JSON"))
        .when(~F.ltrim(line).startswith("{"), F.lit("not a JSON object"))
        # a second value, or text, after the object: '[' line ']' is then not a one-element
        # array (Spark's JSON parsers read the first value and ignore the rest)
        .when(F.coalesce(one_value, F.lit(0)) != 1, F.lit("more than one JSON value on the line"))
        .when(missing_list != "", F.concat(F.lit("missing required field(s): "), missing_list))
    )
    wrong_types = F.concat_ws("; ", *json_types)
    all_typed = _all_typed_pattern(schema)
    if all_typed is not None:  # checked field by field only when the line is not the common one
        wrong_types = F.when(
            ~F.coalesce(F.schema_of_variant(F.col("_variant")).rlike(all_typed), F.lit(False)),
            wrong_types,
        )
    for rule in (
        wrong_types,
        F.concat_ws("; ", *no_date),
        F.concat_ws("; ", *bad_type),
        F.concat_ws("; ", *too_large),
        F.concat_ws("; ", *blank_key),
    ):
        reason = reason.when(rule != "", rule)
    if schema.max_ahead is not None:
        seconds = interval_seconds(schema.max_ahead)
        event_time = F.col(schema.event_time)
        reason = reason.when(
            event_time > F.current_timestamp() + F.expr(f"make_dt_interval(0, 0, 0, {seconds})"),
            F.concat(
                F.lit(f"{schema.event_time} "),
                event_time.cast("string"),
                F.lit(
                    f" is more than {schema.max_ahead} after its ingest time "
                    "(the stream's max_ahead)"
                ),
            ),
        )
    return typed, reason
