"""Jobs written as one SQL file: a header spec, then one Spark SQL query.

    -- merchant_failures_10m: FAILED transactions per merchant per 10-minute window.
    -- State: the window's count, bounded by the 5-minute watermark.
    --
    -- source: transactions
    -- keys: merchant, window_start, window_end
    -- measures: failures
    -- watermark: 5 minutes
    select merchant, window.start as window_start, window.end as window_end,
           count(*) as failures
    from events
    where status = 'FAILED'
    group by merchant, window(event_time, '10 minutes')

The query reads ``events`` (the source's bronze rows, exact duplicates removed within the
watermark), or, for a job that joins, one relation per source named after the stream. The same
query is the batch definition for reconciliation: tidemark runs it over all of bronze in dbt.

Header keys: ``source`` (required), ``joins``, ``keys`` (required), ``measures`` (required),
``watermark`` (required), ``output_mode`` (append or update, default append), ``tolerance``,
``partition_by``, ``open_when``, ``warn_rows``, ``critical_rows``, ``name`` (default: the file
name). Other comment lines are the job's description (the first) and documentation.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame

from streaming_jobs.stateful.dedup import dedup_within_watermark
from streaming_jobs.schemas import StreamSchema
from streaming_jobs.spec import JobSpec, StateBound, StateThresholds

KEYS = {"name", "source", "joins", "keys", "measures", "watermark", "output_mode", "tolerance",
        "partition_by", "open_when", "warn_rows", "critical_rows"}
REQUIRED = ("source", "keys", "measures", "watermark")
_HEADER = re.compile(r"^--\s*([a-z_]+)\s*:\s*(.*?)\s*$")
# Temporary views are session-wide: one job at a time registers its own and resolves its query.
_VIEWS = threading.Lock()


@dataclass(frozen=True)
class SqlQuery:
    """``build`` of a SQL job: dedup each source, expose it as a view, run the query."""

    sql: str
    sources: tuple[StreamSchema, ...]

    def __call__(self, *frames: DataFrame, watermark: str, **_params) -> DataFrame:
        spark = frames[0].sparkSession
        with _VIEWS:
            for stream, frame in zip(self.sources, frames):
                # each source deduplicated on its own declared key and event time
                deduped = dedup_within_watermark(frame, stream.event_time, watermark,
                                                 key=stream.key)
                source = stream.name
                deduped.createOrReplaceTempView(source)
                if len(self.sources) == 1:
                    deduped.createOrReplaceTempView("events")
            return spark.sql(self.sql)  # resolved now: later views do not change it


def _split(value: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in value.split(",") if v.strip())


def load_sql_job(path: Path, known: dict[str, StreamSchema]) -> JobSpec:
    """Read a SQL job file into a JobSpec (``known``: the registered streams); errors name the
    file and the fix."""
    header, text, body = {}, [], []
    lines = path.read_text().splitlines()
    for number, line in enumerate(lines):
        if not line.startswith("--"):
            body = lines[number:]
            break
        match = _HEADER.match(line)
        if match and match.group(1) in KEYS:
            header[match.group(1)] = match.group(2)
        else:
            text.append(line[2:].strip())
    sql = "\n".join(body).strip().rstrip(";")
    missing = [k for k in REQUIRED if not header.get(k)]
    if missing or not sql:
        raise ValueError(
            f"SQL job {path}: {'missing header ' + ', '.join(missing) if missing else 'no query'}"
            f"; start the file with '-- source: <stream>', '-- keys: a, b', '-- measures: m', "
            f"'-- watermark: 10 minutes' lines, then the query")
    name = header.get("name", path.stem)
    source, joins = header["source"], _split(header.get("joins", ""))
    try:
        thresholds = StateThresholds(
            **{k: int(header[k]) for k in ("warn_rows", "critical_rows") if k in header})
        tolerance = float(header.get("tolerance", 0.0))
    except ValueError as exc:
        raise ValueError(f"SQL job {path}: {exc}; warn_rows, critical_rows and tolerance "
                         "are numbers") from None
    unknown = [s for s in (source, *joins) if s not in known]
    if unknown:
        raise ValueError(
            f"SQL job {path}: it reads {', '.join(unknown)}, which no registered stream "
            f"declares; registered streams: {', '.join(sorted(known))}")
    return JobSpec(
        name=name,
        description=next((t for t in text if t), name).split(": ", 1)[-1],
        source=source,
        joins=joins,
        keys=_split(header["keys"]),
        measures=_split(header["measures"]),
        event_time=known[source].event_time,
        state=StateBound(watermark=header["watermark"]),
        output_mode=header.get("output_mode", "append"),
        build=SqlQuery(sql, tuple(known[s] for s in (source, *joins))),
        thresholds=thresholds,
        tolerance=tolerance,
        partition_by=_split(header.get("partition_by", "")),
        batch_sql=sql,
        open_when=header.get("open_when") or None,
    )
