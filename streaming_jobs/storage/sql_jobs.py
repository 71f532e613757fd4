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

Header keys (`HEADER_KEYS`): ``source``, ``keys``, ``watermark`` (required); ``measures``,
``joins``, ``output_mode``, ``tolerance``, ``window_end``, ``open_when``, ``partition_by``,
``warn_rows``, ``critical_rows``, ``unbounded_state``, ``name`` (default: the file name). Other
comment lines are the job's description (the first) and documentation. Errors name the file and
the line.

Expectations on the output rows, one line each (`streaming_jobs.schemas.Expectation`)::

    -- expect some_failures: failures > 0
    -- expect known_merchant: merchant is not null and merchant <> '' on violation fail
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import DataFrame

from streaming_jobs.stateful.dedup import dedup_stream
from streaming_jobs.intervals import interval_seconds
from streaming_jobs.schemas import Expectation, StreamSchema
from streaming_jobs.spec import JobSpec, StateBound, StateThresholds

# Every header key: (required, what it holds). docs/jobs.md lists them.
HEADER_KEYS = {
    "source": (True, "the stream the query reads (as `events` and as its own name)"),
    "keys": (True, "the output columns that identify a row (window bounds included)"),
    "watermark": (True, "how late an event may be, e.g. '10 minutes': bounds every state"),
    "measures": (False, "the other output columns the recon compares (none: a set of keys)"),
    "joins": (False, "more streams the query reads, each by its name"),
    "output_mode": (False, "append (default: rows once final) or update (MERGE per batch)"),
    "tolerance": (False, "numeric tolerance of the recon for number measures (default 0)"),
    "window_end": (False, "the key column holding the end of the row's window or session"),
    "open_when": (False, "SQL condition: a batch row the stream cannot have emitted yet"),
    "partition_by": (False, "gold table partition columns"),
    "warn_rows": (False, "state rows that raise a warning (default 1,000,000)"),
    "critical_rows": (False, "state rows that raise a critical alert (default 5,000,000)"),
    "unbounded_state": (False, "refuse (default) or warn when an operator never evicts state"),
    "name": (False, "the job's name (default: the file name)"),
}
KEYS = set(HEADER_KEYS)
REQUIRED = tuple(k for k, (required, _) in HEADER_KEYS.items() if required)
_HEADER = re.compile(r"^--\s*([a-z_]+)\s*:\s*(.*?)\s*$")
# "-- expect positive: failures > 0 on violation fail" (the action is optional: warn)
_EXPECT = re.compile(r"^--\s*expect\s+(\S+?)\s*:\s*(.*?)\s*$")
_ON_VIOLATION = re.compile(r"^(.*?)\s+on\s+violation\s+(\S+)$", re.IGNORECASE)
_WINDOWED = re.compile(r"\b(window|session_window|window_time)\s*\(", re.IGNORECASE)
# window(<event time>, '<length>' ...): a tumbling or sliding window's length
_WINDOW_LENGTH = re.compile(r"\bwindow\s*\(\s*[\w.`]+\s*,\s*'([^']+)'", re.IGNORECASE)
_SESSION = re.compile(r"\bsession_window\s*\(", re.IGNORECASE)
# Temporary views are session-wide: one job at a time registers its own and resolves its query.
_VIEWS = threading.Lock()


class JobFileError(ValueError):
    """A job file that cannot be loaded: names the file and line, and says what to do."""


@dataclass(frozen=True)
class SqlQuery:
    """``build`` of a SQL job: dedup each source, expose it as a view, run the query."""

    sql: str
    sources: tuple[StreamSchema, ...]
    # the file's whole text as it was read for this query (the version record keeps it)
    text: str | None = field(default=None, compare=False, repr=False)

    def __call__(self, *frames: DataFrame, watermark: str, **_params) -> DataFrame:
        spark = frames[0].sparkSession
        with _VIEWS:
            for stream, frame in zip(self.sources, frames):
                # each source deduplicated on its own declared key and event time
                deduped = dedup_stream(frame, stream, watermark)
                deduped.createOrReplaceTempView(stream.name)
                if len(self.sources) == 1:
                    deduped.createOrReplaceTempView("events")
            return spark.sql(self.sql)  # resolved now: later views do not change it


def _split(value: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in value.split(",") if v.strip())


@dataclass(frozen=True)
class JobFile:
    """A SQL job file read apart: header values and their line numbers, the query and its line."""

    path: Path
    header: dict[str, str]
    lines: dict[str, int]
    description: list[str]
    sql: str
    sql_line: int
    expectations: tuple[tuple[str, str, int], ...] = ()  # (name, text, line)
    text: str = field(default="", repr=False)  # the whole file, as read

    def at(self, key: str | None = None) -> str:
        """``path:line`` of a header key (or of the query)."""
        return f"{self.path}:{self.lines.get(key, self.sql_line) if key else self.sql_line}"

    @classmethod
    def read(cls, path: Path) -> "JobFile":
        header, lines, text, body, sql_line, expect = {}, {}, [], [], 0, []
        whole = path.read_text(encoding="utf-8")
        raw = whole.splitlines()
        for number, line in enumerate(raw, start=1):
            if not line.startswith("--"):
                if line.strip() or body:
                    body.append(line)
                    sql_line = sql_line or number
                continue
            if body:
                body.append(line)
                continue
            expectation = _EXPECT.match(line)
            if expectation:
                expect.append((expectation.group(1), expectation.group(2), number))
                continue
            match = _HEADER.match(line)
            if match and match.group(1) in KEYS:
                key = match.group(1)
                if key in header:
                    raise JobFileError(
                        f"{path}:{number}: header '{key}' is given twice "
                        f"(first on line {lines[key]}); keep one"
                    )
                header[key], lines[key] = match.group(2), number
            else:
                text.append(line[2:].strip())
        sql = "\n".join(body).strip().rstrip(";")
        return cls(path, header, lines, text, sql, sql_line, tuple(expect), text=whole)

    def declared_expectations(self) -> tuple[Expectation, ...]:
        """The ``-- expect <name>: <rule> [on violation warn|fail]`` lines, checked."""
        out = []
        for name, text, number in self.expectations:
            match = _ON_VIOLATION.match(text)
            rule, action = (match.group(1), match.group(2).lower()) if match else (text, "warn")
            try:
                out.append(Expectation(name, rule, action))
            except ValueError as exc:
                raise JobFileError(
                    f"SQL job {self.path}:{number}: {exc}; write '-- expect "
                    "<name>: <rule> on violation warn|fail'"
                ) from None
            if action == "quarantine":
                raise JobFileError(
                    f"SQL job {self.path}:{number}: expectation {name}: a job's output rows "
                    "are not quarantined (the reconciliation would count each as a "
                    "difference); use warn or fail, or quarantine in the stream's expectations"
                )
        return tuple(out)


def window_end_key(keys: tuple[str, ...], window_end: str | None, sql: str) -> str | None:
    """The key holding the end of the row's window or session: declared, else ``window_end``,
    else for a windowed query (window, session_window) its one key named ``*_end``."""
    if window_end:
        return window_end
    if "window_end" in keys:
        return "window_end"
    ends = [k for k in keys if k.endswith("_end")]
    return ends[0] if len(ends) == 1 and _WINDOWED.search(sql) else None


def recon_days(sql: str, joins: tuple[str, ...], window_end: str | None) -> dict:
    """How the job is reconciled by day (``JobSpec.recon_partition``, ``recon_read_back``), or
    {} (in full, every run that has something new): a query over one stream grouped by
    tumbling or sliding windows of its event time gets the day its window ends, and reads
    events back by the longest window. Sessions (a click can extend a session however old) and
    joins (a partner event can change a window before its own day) are recomputed in full."""
    lengths = [interval_seconds(m) for m in _WINDOW_LENGTH.findall(sql)]
    if joins or not window_end or not lengths or None in lengths or _SESSION.search(sql):
        return {}
    return {
        "recon_partition": f"to_date({window_end})",
        "recon_read_back": f"{max(lengths)} seconds",
    }


def load_sql_job(path: Path, known: dict[str, StreamSchema]) -> JobSpec:
    """Read a SQL job file into a JobSpec (``known``: the registered streams); errors name the
    file, the line and the fix."""
    job = JobFile.read(path)
    header = job.header
    missing = [k for k in REQUIRED if not header.get(k)]
    if missing or not job.sql:
        raise JobFileError(
            f"SQL job {path}:1: {'missing header ' + ', '.join(missing) if missing else 'no query'}"
            f"; start the file with '-- source: <stream>', '-- keys: a, b', "
            f"'-- watermark: 10 minutes' lines (optionally '-- measures: m'), then the query "
            f"(`tidemark new job NAME --sql --source STREAM` writes one)"
        )
    name = header.get("name", path.stem)
    source, joins = header["source"], _split(header.get("joins", ""))
    numbers = {}
    for key, kind in (("warn_rows", int), ("critical_rows", int), ("tolerance", float)):
        if key in header:
            try:
                numbers[key] = kind(header[key].replace("_", "").replace(",", ""))
            except ValueError:
                raise JobFileError(
                    f"SQL job {job.at(key)}: {key} is a number, got {header[key]!r}"
                ) from None
    unbounded = header.get("unbounded_state", "").strip() or None
    if unbounded not in (None, "refuse", "warn"):
        raise JobFileError(
            f"SQL job {job.at('unbounded_state')}: unbounded_state is 'refuse' or "
            f"'warn', got {unbounded!r}"
        )
    unknown = [s for s in (source, *joins) if s not in known]
    if unknown:
        raise JobFileError(
            f"SQL job {job.at('joins' if source in known else 'source')}: it reads "
            f"{', '.join(unknown)}, which no registered stream declares; registered streams: "
            f"{', '.join(sorted(known))}"
        )
    keys, measures = _split(header["keys"]), _split(header.get("measures", ""))
    twice = sorted({c for c in [*keys, *measures] if [*keys, *measures].count(c) > 1})
    if twice:
        raise JobFileError(
            f"SQL job {job.at('measures' if set(twice) & set(measures) else 'keys')}"
            f": {', '.join(twice)} listed twice in keys and measures; a column is "
            "a key or a measure, once"
        )
    window_end = header.get("window_end") or None
    if window_end and window_end not in keys:
        raise JobFileError(
            f"SQL job {job.at('window_end')}: window_end {window_end!r} is not one "
            f"of the keys ({', '.join(keys)})"
        )
    window_end = window_end_key(keys, window_end, job.sql)
    # the default rule is the spec's (`JobSpec.recon_open_when`): from window_end, and the
    # delay of a join before the aggregation that the analysis finds; a declared one is kept
    open_when = header.get("open_when") or None
    if open_when is None and window_end is None and _WINDOWED.search(job.sql):
        raise JobFileError(
            f"SQL job {job.at('keys')}: the query groups by a window or session but no key says "
            "when a row is final: name the key holding the window's end ('-- window_end: "
            "session_end'), or write '-- open_when: <condition>' (see docs/jobs.md); without it the "
            "recon would count every open window as missing"
        )
    expectations = job.declared_expectations()
    try:
        return JobSpec(
            name=name,
            description=next((t for t in job.description if t), name).split(": ", 1)[-1],
            source=source,
            joins=joins,
            keys=keys,
            measures=measures,
            event_time=known[source].event_time,
            state=StateBound(watermark=header["watermark"]),
            output_mode=header.get("output_mode", "append"),
            build=SqlQuery(job.sql, tuple(known[s] for s in (source, *joins)), text=job.text),
            thresholds=StateThresholds(**{k: v for k, v in numbers.items() if k != "tolerance"}),
            tolerance=numbers.get("tolerance", 0.0),
            partition_by=_split(header.get("partition_by", "")),
            batch_sql=job.sql,
            open_when=open_when,
            window_end=window_end,
            **recon_days(job.sql, joins, window_end),
            unbounded_state=unbounded,
            origin=str(path),
            origin_lines={**job.lines, "query": job.sql_line},
            expectations=expectations,
        )
    except ValueError as exc:
        # the header line the refusal is about, when it names one
        at = next((job.at(key) for key in header if f": {key} " in str(exc)), f"{path}:1")
        raise JobFileError(f"SQL job {at}: {exc}") from None
