"""What a streaming job declares about itself."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from pyspark.sql import DataFrame


@dataclass(frozen=True)
class StateBound:
    """How a job keeps its state finite. Exactly one of watermark or ttl is the main bound."""

    watermark: str | None = None  # e.g. "10 minutes": late events behind it are dropped
    ttl: str | None = None


@dataclass(frozen=True)
class StateThresholds:
    """Per-job state-size limits that sensors compare against."""

    warn_rows: int = 1_000_000
    critical_rows: int = 5_000_000
    warn_bytes: int = 512 * 1024**2
    critical_bytes: int = 2 * 1024**3


COLUMN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class JobSpec:
    name: str
    description: str
    source: str  # a registered stream: the job reads lake/bronze/<source>
    keys: tuple[str, ...]  # the gold table's full key (window bounds included)
    measures: tuple[str, ...]
    event_time: str
    state: StateBound
    output_mode: str  # "append" (Delta sink) or "update" (foreachBatch + idempotent MERGE)
    build: Callable[..., DataFrame]
    params: dict = field(default_factory=dict)  # plain values handed to build(df, **params)
    thresholds: StateThresholds = field(default_factory=StateThresholds)
    tolerance: float = 0.0  # numeric tolerance for reconciliation of measures
    # Reconciliation warns (a non-blocking check) when more than this share of the rows
    # compared is explained (window_open + late_dropped): many open windows or late events.
    recon_warn_share: float = 0.5
    # More registered streams for jobs that join: build(source, *joins, **params).
    joins: tuple[str, ...] = ()
    # The gold table's layout: partition columns and Delta table properties (append jobs).
    partition_by: tuple[str, ...] = ()
    table_properties: dict = field(default_factory=dict)
    # The same definition in Spark SQL, for reconciliation: a query over one relation per
    # source, named after the stream (``events`` too for a single source), holding each
    # distinct event once. tidemark generates the job's batch and recon dbt models from it.
    batch_sql: str | None = None
    # When a key the stream has not emitted yet is still expected later (recon's window_open),
    # as a SQL condition on the truth row t, the on-time row o and the stream state s
    # (stream_watermark). None: window_end after the watermark if the keys have window_end,
    # otherwise never (the job emits rows as soon as it reads their events).
    open_when: str | None = None
    # The key column holding the end of the row's window or session (default: window_end if it
    # is a key): the recon's default open_when is "that end is after the stream's watermark".
    window_end: str | None = None
    # How far behind the stream's watermark the job emits its windows: a time-bounded
    # stream-stream join before its aggregation holds them back. Found by `tidemark check`
    # (`streaming_jobs.runtime.analysis.emit_delay_seconds`) and set by the registry; not declared.
    emit_delay_seconds: int = 0
    # What tidemark check does when an operator of the job never evicts state: "refuse" or
    # "warn"; None: the setting TIDEMARK_UNBOUNDED_STATE (default refuse).
    unbounded_state: str | None = None
    # Where the job is declared (file, and for SQL jobs the line of each header key and of the
    # query), for errors; set by the registry.
    origin: str | None = None
    origin_lines: dict = field(default_factory=dict)
    # The job's code as the registry loaded it (`streaming_jobs.core.versions.loaded_code`):
    # its pieces' digests and its file's text, so that the version it is labelled with is the
    # code it runs, even once its file changed under a run that still holds this code. Set by
    # the registry; not declared.
    loaded_code: dict | None = field(default=None, compare=False, repr=False)
    # Rules on the job's output rows (`streaming_jobs.schemas.Expectation`): warn or fail.
    expectations: tuple = ()
    # Incremental reconciliation (orchestration/recon/recon_scope.py) recomputes the days from the
    # earliest one a new event can change. recon_partition: the UTC date a gold or batch row
    # belongs to, as SQL over its columns (e.g. "to_date(window_start)"); None: the job is
    # reconciled in full every run. recon_lookback: how far before a new event the row it
    # changes can lie (a join's bound); recon_read_back: how far before the first recomputed
    # day the batch side must read events to get that day's rows right (a sliding window's
    # length, a session gap). recon_chain: the rows are sessions (window_start, window_end
    # keys) that a new event may extend or merge however long ago they started: the scope also
    # reaches back to every session of the last reconciliation that ends at or after it.
    # recon_composed: the job's batch model composes its rows from the ones its table holds and
    # the events the stream read since (dbt's macros/compose.sql), so an incremental run reads
    # only new events; a job without a day (a profile per user) is then incremental too.
    recon_partition: str | None = None
    recon_lookback: str = "0 seconds"
    recon_read_back: str = "0 seconds"
    recon_chain: bool = False
    recon_composed: bool = False
    # The rows of the source stream the job reads at all, as SQL over its columns (e.g.
    # "status = 'FAILED'"), applied after the watermark and before the deduplication
    # (`streaming_jobs.stateful.dedup`): its late count covers only those rows, so the lateness
    # replay (dbt's classify_lateness, the progress fold's ledger) keeps only them too.
    # None: every row.
    reads: str | None = None

    @property
    def recon_open_when(self) -> str:
        if self.open_when:
            return self.open_when
        end = self.window_end or ("window_end" if "window_end" in self.keys else None)
        if end:
            held_back = (
                f" - interval {self.emit_delay_seconds} seconds" if self.emit_delay_seconds else ""
            )
            return f"coalesce(t.{end}, o.{end}) > s.stream_watermark{held_back}"
        return "false"

    def at(self, key: str | None = None) -> str:
        """``file:line`` of a header key or the query (SQL jobs), or the file."""
        if not self.origin:
            return f"job {self.name}"
        line = self.origin_lines.get(key or "query")
        return f"{self.origin}:{line}" if line else self.origin

    @property
    def bound_seconds(self) -> int:
        """How far behind the input its state may lag: the watermark delay, or the TTL."""
        from streaming_jobs.intervals import interval_seconds

        return interval_seconds(self.state.watermark or self.state.ttl) or 0

    @property
    def freshness_seconds(self) -> tuple[int, int]:
        """(warn, fail): how old the job's last report may be before it is stale.

        A job that has not committed for longer than the lateness it tolerates (its watermark
        or TTL, at least 2 minutes) is behind by more than its own definition allows: warn;
        three times that: fail. A continuous run reports every flush while the job commits or
        is caught up, so only a stalled or stopped job goes stale.
        """
        warn = max(self.bound_seconds, 120)
        return warn, 3 * warn

    @property
    def sources(self) -> tuple[str, ...]:
        return (self.source, *self.joins)

    def apply(self, *events: DataFrame) -> DataFrame:
        """Run ``build`` on one frame per source with the spec's plain values (window, TTL...)."""
        if len(events) != len(self.sources):
            raise ValueError(
                f"job {self.name} reads {', '.join(self.sources)}: "
                f"pass one DataFrame each, got {len(events)}"
            )
        bounds = {
            k: v for k, v in (("watermark", self.state.watermark), ("ttl", self.state.ttl)) if v
        }
        return self.build(*events, **self.params, **bounds)

    def __post_init__(self) -> None:
        from streaming_jobs.schemas import NAME

        if not isinstance(self.name, str) or not NAME.match(self.name):
            raise ValueError(
                f"job {self.name!r}: a job name is lower case letters, digits and _, starting "
                "with a letter (it names the checkpoint, the gold table and dbt models)"
            )
        if self.name.startswith("bronze_"):
            raise ValueError(
                f"job {self.name!r}: names starting with bronze_ are the ingestion "
                "queries' (bronze_<stream>): their checkpoints would be shared; "
                "rename the job"
            )
        if not self.keys:
            raise ValueError(
                f"job {self.name}: declare its keys: the output columns that identify a row"
            )
        if self.window_end and self.window_end not in self.keys:
            raise ValueError(
                f"job {self.name}: window_end {self.window_end!r} is not one of "
                f"its keys ({', '.join(self.keys)})"
            )
        if self.unbounded_state not in (None, "refuse", "warn"):
            raise ValueError(
                f"job {self.name}: unbounded_state is 'refuse' or 'warn', got "
                f"{self.unbounded_state!r}"
            )
        if self.output_mode not in ("append", "update"):
            raise ValueError(
                f"job {self.name}: output_mode must be 'append' or 'update', got {self.output_mode!r}"
            )
        import math

        for setting, value in (
            ("tolerance", self.tolerance),
            ("recon_warn_share", self.recon_warn_share),
        ):
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or value < 0
            ):
                raise ValueError(
                    f"job {self.name}: {setting} is a finite number of at least 0, "
                    f"got {value!r} (NaN, infinity or a negative one would make "
                    "every comparison fail or pass)"
                )
        for column in self.partition_by:
            # a column of the gold table: Spark names a partition folder after it
            if not isinstance(column, str) or not COLUMN.match(column):
                raise ValueError(
                    f"job {self.name}: partition_by {column!r} is not a column name "
                    "(letters, digits and _, starting with a letter or _): name "
                    "columns of the job's output"
                )
        from streaming_jobs.schemas import check_expectations

        object.__setattr__(
            self,
            "expectations",
            check_expectations(f"job {self.name}", self.expectations, ("warn", "fail")),
        )
        if not (self.state.watermark or self.state.ttl):
            raise ValueError(
                f"job {self.name}: a stateful job must bound its state: declare a watermark or a ttl"
            )
