"""Parse raw JSON lines into typed rows, or give each bad line its reason.

`parse_lines` is pure: a DataFrame of raw lines in, the same rows out with the typed fields
and a ``_reason`` column that is null for a good row. Bronze keeps the good rows, quarantine
keeps the raw line and the reason, so every line lands in exactly one of the two.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from streaming_jobs.schemas import StreamSchema


def _typed(raw: Column, dtype: T.DataType) -> Column:
    if isinstance(dtype, T.StringType):
        return raw
    if isinstance(dtype, T.TimestampType):
        return F.try_to_timestamp(raw)
    return raw.try_cast(dtype)


def parse_lines(lines: DataFrame, schema: StreamSchema, line_col: str = "value") -> DataFrame:
    """Add the typed fields of ``schema`` and ``_reason`` (null when the line is good)."""
    raw = F.from_json(F.col(line_col), schema.raw_struct)
    parsed = lines.withColumn("_raw", raw)
    typed = [_typed(F.col("_raw")[f.name], f.dtype).alias(f.name) for f in schema.fields]
    missing = [F.when(F.col("_raw")[f.name].isNull(), F.lit(f.name)) for f in schema.fields]
    bad_type = [
        F.when(F.col("_raw")[f.name].isNotNull() & F.col(f.name).isNull(),
               F.lit(f"{f.name} is not a valid {f.dtype.simpleString()}"))
        for f in schema.fields
    ]
    with_fields = parsed.select("*", *typed)
    missing_list = F.concat_ws(", ", *missing)
    type_list = F.concat_ws("; ", *bad_type)
    reason = (
        F.when(F.trim(F.col(line_col)) == "", F.lit("empty line"))
        .when(F.try_parse_json(F.col(line_col)).isNull(), F.lit("invalid JSON"))
        .when(~F.ltrim(F.col(line_col)).startswith("{"), F.lit("not a JSON object"))
        .when(missing_list != "", F.concat(F.lit("missing required field(s): "), missing_list))
        .when(type_list != "", type_list)
    )
    return with_fields.withColumn("_reason", reason).drop("_raw")
