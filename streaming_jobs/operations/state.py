"""State size: readings from ``ops/stream_progress``, thresholds with hysteresis, growth, inspection.

A *reading* is a job's latest micro-batch: per stateful operator its rows, memory and on-disk
bytes (RocksDB's SST file size). `level` compares a reading with the job's `StateThresholds`:
rows and bytes (the larger of memory and disk) each against warn and critical. The level only
falls when the reading is ``hysteresis`` (10 %) under the threshold it crossed, so a reading
hovering at the line does not flap.

`growth` fits a line through the job's recent readings (rows against wall time) and says when,
at that rate, state reaches the critical row threshold.

`inspect` reads the checkpoint itself through Spark's ``state-metadata`` and ``statestore``
readers: per operator its store, partitions and batch range, rows, and the largest keys.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from streaming_jobs.core import locations
from streaming_jobs.core.locations import Location
from streaming_jobs.storage import ops_tables
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.spec import StateThresholds

LEVELS = ("ok", "warning", "critical")


@dataclass(frozen=True)
class OperatorReading:
    operator: str
    rows: int
    memory_bytes: int
    disk_bytes: int


@dataclass(frozen=True)
class Reading:
    job: str
    batch_id: int
    ts: datetime
    operators: tuple[OperatorReading, ...]

    @property
    def rows(self) -> int:
        return sum(o.rows for o in self.operators)

    @property
    def memory_bytes(self) -> int:
        return sum(o.memory_bytes for o in self.operators)

    @property
    def disk_bytes(self) -> int:
        return sum(o.disk_bytes for o in self.operators)


def _reading(row: dict) -> Reading:
    ops = tuple(
        OperatorReading(
            o["operator"],
            o["rows"] or 0,
            o["memory_bytes"] or 0,
            dict(o["custom"] or {}).get("rocksdbSstFileSize", 0),
        )
        for o in (row["state_operators"] or [])
    )
    return Reading(row["job"], row["batch_id"], row["ts"], ops)


def history(cfg: TidemarkConfig, job: str, last: int = 20) -> list[Reading]:
    """The job's last ``last`` readings (batches with state operators), oldest first.

    Read from ``ops/stream_progress`` with delta-rs: no JVM, so a sensor tick stays short.
    """
    rows = ops_tables.read(
        cfg,
        "stream_progress",
        where=f"job = {ops_tables.literal(job)}",
        columns=["job", "batch_id", "ts", "state_operators"],
    )
    rows = [r for r in rows if r["state_operators"]]
    rows.sort(key=lambda r: (r["ts"], r["batch_id"]))
    return [_reading(r) for r in rows[-last:]]


def level(
    reading: Reading, limits: StateThresholds, previous: str = "ok", hysteresis: float = 0.1
) -> tuple[str, str]:
    """The reading's level and why, given the level it had (for hysteresis)."""
    size = max(reading.memory_bytes, reading.disk_bytes)
    checks = (
        ("critical", reading.rows, limits.critical_rows, "rows"),
        ("critical", size, limits.critical_bytes, "bytes"),
        ("warning", reading.rows, limits.warn_rows, "rows"),
        ("warning", size, limits.warn_bytes, "bytes"),
    )
    for name, value, limit, unit in checks:
        # Above the line: this level. Held at a level already: stay until clearly under it.
        held = LEVELS.index(previous) >= LEVELS.index(name)
        if value > limit or (held and value > limit * (1 - hysteresis)):
            return name, (
                f"state {unit} {value:,} {'>' if value > limit else 'still near'} "
                f"{name} threshold {limit:,} (batch {reading.batch_id})"
            )
    return "ok", (
        f"state rows {reading.rows:,} / bytes {size:,} under warn thresholds "
        f"{limits.warn_rows:,} rows / {limits.warn_bytes:,} bytes"
    )


@dataclass(frozen=True)
class Growth:
    rows_per_hour: float
    hours_to_critical: float | None  # None: not growing


def growth(
    readings: list[Reading], limits: StateThresholds, min_span_hours: float = 0.25
) -> Growth | None:
    """Least-squares rows/hour over the readings; None with fewer than 3, or spanning less
    than ``min_span_hours`` (a job that just started fills its state up to its watermark or
    TTL: that ramp is not a trend)."""
    points = [(r.ts.timestamp() / 3600.0, float(r.rows)) for r in readings]
    if len(points) < 3 or points[-1][0] - points[0][0] < max(min_span_hours, 1e-9):
        return None
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_r = sum(r for _, r in points) / n
    spread = sum((t - mean_t) ** 2 for t, _ in points)
    if spread == 0:
        return None
    slope = sum((t - mean_t) * (r - mean_r) for t, r in points) / spread
    current = points[-1][1]
    if slope <= 0 or current >= limits.critical_rows:
        return Growth(slope, None)
    return Growth(slope, (limits.critical_rows - current) / slope)


@dataclass
class OperatorState:
    operator_id: int
    operator: str
    store: str
    partitions: int
    min_batch: int
    max_batch: int
    variables: list[str] = field(default_factory=list)
    rows: int = 0
    largest: list[tuple[str, int]] = field(default_factory=list)  # (key as JSON, value bytes)


def _properties(properties: str | None) -> dict:
    """An operator's properties from the state metadata (JSON); none where they do not parse."""
    try:
        info = json.loads(properties or "{}")
    except ValueError:
        return {}
    return info if isinstance(info, dict) else {}


def _state_variables(info: dict) -> list[str]:
    # "$..." variables are Spark's own bookkeeping (timers, TTL indexes), not the job's state
    return [
        v["stateName"]
        for v in info.get("stateVariables", [])
        if v.get("stateName") and not v["stateName"].startswith("$")
    ]


# A stream-stream join's stores: each side's key counts and its rows by key and index. On
# Spark's join state format 3 they are column families of the operator's one store ("default"),
# read by these names; on format 2, stores of their own, each listed by the state metadata.
JOIN_STORES = tuple(
    f"{side}-{kind}"
    for side in ("left", "right")
    for kind in ("keyToNumValues", "keyWithIndexToValue")
)


def _stores(operator: str, store: str, info: dict) -> list[str]:
    """The stores to read for one row of the state metadata: a format-3 join's four column
    families, so that a join reads the same on either format; else the row's own store."""
    families = info.get("useVirtualColumnFamilies")
    if operator == "symmetricHashJoin" and families is True and store == "default":
        return list(JOIN_STORES)
    return [store]


def inspect(
    spark: SparkSession, cfg: TidemarkConfig, job: str, top: int = 5
) -> list[OperatorState]:
    """Per stateful operator of the job's checkpoint: what it holds, and its largest keys."""
    place = Location.of(cfg.paths.checkpoint(job))
    if not locations.is_dir(place / "state"):
        return []
    checkpoint = place.spark
    # Spark's state reader loads each store through the RocksDB provider, which reports to the
    # driver's state store coordinator; a session that has not touched its streams (a fresh
    # `tidemark state` process) has none, and every read then fails. Creating the session's
    # StreamingQueryManager creates the coordinator.
    spark.streams.active  # noqa: B018 - for its side effect
    meta = spark.read.format("state-metadata").load(checkpoint).collect()
    out = []
    for m in meta:
        props = _properties(m.asDict().get("operatorProperties"))
        variables = _state_variables(props)
        for store in _stores(m.operatorName, m.stateStoreName, props):
            op = OperatorState(
                m.operatorId,
                m.operatorName,
                store,
                m.numPartitions,
                m.minBatchId,
                m.maxBatchId,
                variables,
            )
            reads = [{"stateVarName": v} for v in variables] or [{"storeName": store}]
            out.append(_read(spark, checkpoint, op, reads, top))
    return out


def _read(
    spark: SparkSession, checkpoint: str, op: OperatorState, reads: list[dict], top: int
) -> OperatorState:
    """``op`` with its rows and largest values, read store by store (or variable by variable)."""
    for options in reads:
        state = (
            spark.read.format("statestore")
            .option("operatorId", op.operator_id)
            .options(**options)
            .load(checkpoint)
        )
        held = [c for c in state.columns if c not in ("key", "partition_id")]
        sized = state.select(
            F.to_json(F.struct("key")).alias("key"),
            F.length(F.to_json(F.struct(*held))).alias("bytes"),
        )
        # one pass over the store: its row count and its largest values (a bounded heap)
        [read] = sized.agg(
            F.count(F.lit(1)).alias("rows"),
            F.max_by(F.struct("key", "bytes"), "bytes", max(top, 1)).alias("largest"),
        ).collect()
        op.rows += read.rows
        op.largest += [(r.key, r.bytes) for r in read.largest or []]
    op.largest = sorted(op.largest, key=lambda kv: -kv[1])[:top]
    return op
