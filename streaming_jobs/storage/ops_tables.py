"""The ops tables (``lake/ops/<name>``): what the running system records about itself.

``stream_progress`` (one row per micro-batch of every query), ``stream_failures`` (queries that
ended with an error) and ``alerts`` (the alert outbox) are written by many processes at once:
every run's progress flush, the failure recorder, the sensors. They are written and read here
with delta-rs, in plain Python: a sensor tick or a progress flush never starts a JVM, and a
small write is milliseconds, not a Spark job.

Concurrency. Every commit to an ops table is taken under the table's writer lock,
``lake/ops/<name>.lock`` (`leases.exclusive`): on a local disk an ``flock`` (the OS releases it
however its holder exits); on an object store a lease, taken by conditional put and checked
(its fencing token) right before each commit, across processes and machines. Delta's
optimistic concurrency alone is not enough: on a local file system a log commit is
check-then-rename, which two processes can both pass, and a writer's read-then-write (an upsert,
a replace) must see every commit before its own. On a store, delta-rs also commits each log
entry by conditional put (``If-None-Match: *``), and a conflict is retried. Tables are created
under the same lock, so two first writers never race to create one (Delta's
``DELTA_PROTOCOL_CHANGED``).

Every 50 commits a table gets a log checkpoint, so readers (delta-rs, Spark, dbt) replay a
short log however many small appends it took.

Spark (dbt, through the SQL endpoint or its session) only ever reads these tables.
"""

from __future__ import annotations

import os
import socket
import time
from contextlib import contextmanager

import pyarrow as pa
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from streaming_jobs.core import locations
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.core.leases import exclusive
from streaming_jobs.core.locations import Where

# -- schemas (Spark types: dbt reads these tables through Spark) -----------------------------

OPERATOR = T.StructType(
    [
        T.StructField("operator", T.StringType()),
        T.StructField("rows", T.LongType()),
        T.StructField("rows_updated", T.LongType()),
        T.StructField("rows_removed", T.LongType()),
        T.StructField("memory_bytes", T.LongType()),
        T.StructField("dropped_by_watermark", T.LongType()),
        T.StructField("commit_ms", T.LongType()),
        T.StructField("partitions", T.LongType()),
        T.StructField("custom", T.MapType(T.StringType(), T.LongType())),
    ]
)

SOURCE_VERSIONS = T.StructType(
    [
        T.StructField("source_table", T.StringType()),  # the lake table's name, e.g. "orders"
        T.StructField("version_from", T.LongType()),  # exclusive
        T.StructField("version_to", T.LongType()),  # inclusive
    ]
)

PROGRESS_SCHEMA = T.StructType(
    [
        T.StructField("job", T.StringType()),
        T.StructField("query_id", T.StringType()),
        T.StructField("run_id", T.StringType()),
        T.StructField("batch_id", T.LongType()),
        T.StructField("ts", T.TimestampType()),
        T.StructField("batch_duration_ms", T.LongType()),
        T.StructField("num_input_rows", T.LongType()),
        T.StructField("input_rows_per_second", T.DoubleType()),
        T.StructField("processed_rows_per_second", T.DoubleType()),
        T.StructField("num_output_rows", T.LongType()),
        T.StructField("watermark", T.TimestampType()),
        T.StructField("state_rows", T.LongType()),
        T.StructField("state_memory_bytes", T.LongType()),
        T.StructField("state_disk_bytes", T.LongType()),
        T.StructField("rows_dropped_by_watermark", T.LongType()),
        T.StructField("state_commit_ms", T.LongType()),
        T.StructField("durations_ms", T.MapType(T.StringType(), T.LongType())),
        T.StructField("state_operators", T.ArrayType(OPERATOR)),
        T.StructField("source_version_from", T.LongType()),
        T.StructField("source_version_to", T.LongType()),
        T.StructField("source_versions", T.ArrayType(SOURCE_VERSIONS)),
        T.StructField("progress_json", T.StringType()),
        # The version of the job's output table that holds exactly this batch's writes (and every
        # earlier batch's): reconciliation reads the output as of it, so a table written ahead of
        # the recorded progress never looks like a difference.
        T.StructField("sink_version", T.LongType()),
        # Kafka sources: records still unread when the batch ended (its partitions' latest offsets
        # minus where it stopped); null for landing and Delta sources
        T.StructField("source_lag_rows", T.LongType()),
        # Set on a rollup row only: retention folds a lineage's old batches into one row
        # (`streaming_jobs.operations.lineage`) that keeps their sums, their version ranges and the
        # last batch's watermark, position and state; this is how many batches it holds.
        T.StructField("rolled_up_batches", T.LongType()),
        # the job's version that ran the batch (`streaming_jobs.core.versions`); null for
        # ingestion queries and rows written before versions
        T.StructField("job_version", T.StringType()),
    ]
)

# The bronze rows a job dropped as late in batches that retention folded into a rollup row:
# with the batches' own late thresholds gone, reconciliation's lateness replay reads these.
LATE_ROWS_SCHEMA = T.StructType(
    [
        T.StructField("job", T.StringType()),
        T.StructField("source_table", T.StringType()),
        T.StructField("batch_id", T.LongType()),  # the folded batch that read the row
        T.StructField("bronze_version", T.LongType()),  # the row's row_commit_version
        T.StructField("row_id", T.LongType()),  # Delta row tracking's stable row id
        T.StructField("event_time", T.TimestampType()),
        T.StructField("late_threshold", T.TimestampType()),
        T.StructField("recorded_at", T.TimestampType()),
        # The batch's own report counted none of its input: it re-ran after a stop or a crash
        # with its write already committed, so the Delta sink skipped it and Spark reported no
        # rows read and none dropped. Its late rows are in no rows_dropped_by_watermark.
        T.StructField("report_lost", T.BooleanType()),
    ]
)

FAILURE_SCHEMA = T.StructType(
    [
        T.StructField("job", T.StringType()),
        T.StructField("run_id", T.StringType()),
        T.StructField("failed_at", T.TimestampType()),
        T.StructField("error", T.StringType()),
        # the batch it was running (planned, not committed); null outside a batch
        T.StructField("batch_id", T.LongType()),
        # for the failure that holds a job: the row its batch fails on, or why none was found
        # (`streaming_jobs.runtime.locate`); null otherwise
        T.StructField("located", T.StringType()),
    ]
)

ALERT_SCHEMA = T.StructType(
    [
        T.StructField("alert_id", T.StringType()),  # <dedup_key>#<incident>
        T.StructField("dedup_key", T.StringType()),
        T.StructField("incident", T.IntegerType()),
        T.StructField("job", T.StringType()),
        T.StructField("kind", T.StringType()),
        T.StructField("severity", T.StringType()),
        T.StructField("message", T.StringType()),
        T.StructField("first_seen", T.TimestampType()),
        T.StructField("last_seen", T.TimestampType()),
        T.StructField("seen_count", T.LongType()),
        T.StructField("resolved_at", T.TimestampType()),
        T.StructField("resolution", T.StringType()),
        T.StructField("firing_delivered_at", T.TimestampType()),
        T.StructField("resolved_delivered_at", T.TimestampType()),
        T.StructField("attempts", T.IntegerType()),
        T.StructField("next_attempt_at", T.TimestampType()),
        T.StructField("last_error", T.StringType()),
    ]
)

# Declared expectations, counted: one row per query, checkpoint identity, batch and rule
# (`streaming_jobs.storage.expectations`).
EXPECTATION_SCHEMA = T.StructType(
    [
        T.StructField("result_id", T.StringType()),  # <query>:<query_id>:<batch_id>:<rule>
        T.StructField("job", T.StringType()),  # the query: a job, or bronze_<stream>
        T.StructField("rule", T.StringType()),
        T.StructField("predicate", T.StringType()),
        T.StructField("action", T.StringType()),
        T.StructField("query_id", T.StringType()),
        T.StructField("batch_id", T.LongType()),
        T.StructField("rows_checked", T.LongType()),
        T.StructField("rows_failed", T.LongType()),
        T.StructField("recorded_at", T.TimestampType()),
    ]
)

# Every reconciliation run, whatever its outcome: one row per job it reconciled (or one row with
# no job, for a run that failed before any job's models ran). Written by tidemark-dbt from dbt's
# own results, after the build, so a run whose checks fail (and whose recon_summary dbt skips)
# is recorded all the same (`orchestration.recon.runs`).
RECON_RUN_SCHEMA = T.StructType(
    [
        T.StructField("run_key", T.StringType()),  # dbt's invocation id
        T.StructField("job", T.StringType()),
        T.StructField("started_at", T.TimestampType()),
        T.StructField("finished_at", T.TimestampType()),
        T.StructField("run_status", T.StringType()),  # passed | failed | error
        T.StructField("status", T.StringType()),  # the job's: passed | failed | not_built
        T.StructField("rows_compared", T.LongType()),  # null when its recon table was not built
        T.StructField("unexplained_rows", T.LongType()),
        T.StructField("class_rows", T.MapType(T.StringType(), T.LongType())),
        T.StructField("failed_checks", T.ArrayType(T.StringType())),  # "<check>: <n> rows"
        T.StructField("late_events_replayed", T.LongType()),
        T.StructField("late_events_reported", T.LongType()),
        T.StructField("late_events_report_lost", T.LongType()),
        T.StructField("message", T.StringType()),
        T.StructField("dagster_run_id", T.StringType()),
    ]
)

# Every swap of a job's version (`streaming_jobs.operations.shadow`): a rebuild beside the live
# version swapped in, or a rollback to the previous one. One row per swap, written when it is
# done (a swap cut short is finished by the next run that takes the job's checkpoint).
JOB_CHANGE_SCHEMA = T.StructType(
    [
        T.StructField("change_id", T.StringType()),  # <job>:<the swap's stamp>
        T.StructField("job", T.StringType()),
        T.StructField("kind", T.StringType()),  # rebuild | rollback
        T.StructField("from_version", T.StringType()),  # the job's version that served before
        T.StructField("to_version", T.StringType()),  # the one serving after
        T.StructField("planned_at", T.TimestampType()),
        T.StructField("swapped_at", T.TimestampType()),
        T.StructField("gold_version", T.LongType()),  # the gold commit that swapped the rows
        T.StructField("previous_gold_version", T.LongType()),  # gold before it (kept)
        T.StructField("gold_rows", T.LongType()),  # rows gold holds after the swap
        T.StructField("query_id", T.StringType()),  # the checkpoint serving after
        T.StructField("state_partitions", T.LongType()),  # of its state (null: stateless)
        # a rebuild's reconciliation before its swap (null: not reconciled, or a rollback)
        T.StructField("recon_compared", T.LongType()),
        T.StructField("recon_unexplained", T.LongType()),
        # batches the new version streamed after its reconciliation, while it caught up
        # with bronze before the swap: the next reconciliation of the job covers them
        T.StructField("unreconciled_batches", T.LongType()),
    ]
)

# The tables whose rows a query records under its name (``job``): its lineage, as a rebuild
# renames it and a new checkpoint forgets it.
QUERY_ROWS = ("stream_progress", "stream_late_rows", "stream_failures", "expectations")

SCHEMAS: dict[str, T.StructType] = {
    "stream_progress": PROGRESS_SCHEMA,
    "stream_failures": FAILURE_SCHEMA,
    "alerts": ALERT_SCHEMA,
    "expectations": EXPECTATION_SCHEMA,
    "stream_late_rows": LATE_ROWS_SCHEMA,
    "recon_runs": RECON_RUN_SCHEMA,
    "job_changes": JOB_CHANGE_SCHEMA,
}
CHECKPOINT_EVERY = 50
COMMIT_ATTEMPTS = 8


class OpsTableError(RuntimeError):
    """An ops table could not be written; the message names the table and what to do."""


def arrow_schema(name: str) -> pa.Schema:
    # Timestamps are UTC instants (Delta `timestamp`), as Spark reads them in its UTC session.
    return to_arrow_schema(SCHEMAS[name], timezone="UTC")


def path(cfg: TidemarkConfig, name: str) -> Where:
    return cfg.paths.table("ops", name)


def exists(cfg: TidemarkConfig, name: str) -> bool:
    return locations.is_delta_table(path(cfg, name))


def _create(cfg: TidemarkConfig, name: str) -> None:
    locations.delta_create(
        path(cfg, name), pa.Table.from_pylist([], schema=arrow_schema(name)), mode="append"
    )


def _lock(cfg: TidemarkConfig, name: str):
    """The table's writer lock (`leases.exclusive`): an flock on a disk, a lease on a store."""
    return exclusive(
        locations.Location.of(path(cfg, name)).with_name(f"{name}.lock"),
        f"ops table {name} writer (pid {os.getpid()} on {socket.gethostname()})",
    )


def _arrow(name: str, rows: list[dict]) -> pa.Table:
    schema = arrow_schema(name)
    return pa.Table.from_pylist(
        [{f.name: r.get(f.name) for f in schema} for r in rows], schema=schema
    )


class Locked:
    """One ops table while its writer lock is held: every method is one commit (retried on a
    conflict), and reads see every commit made before."""

    def __init__(self, cfg: TidemarkConfig, name: str, held=None) -> None:
        self.cfg, self.name, self.held = cfg, name, held

    def _commit(self, write) -> None:
        from deltalake.exceptions import CommitFailedError, DeltaError

        where = path(self.cfg, self.name)
        for attempt in range(COMMIT_ATTEMPTS):
            try:
                if self.held is not None:
                    self.held.check()  # a lease on a store: still ours (raises Fenced)
                write(locations.delta_table(where))
                break
            except (CommitFailedError, DeltaError, OSError) as exc:
                retryable = isinstance(exc, CommitFailedError) or "conflict" in str(exc).lower()
                if not retryable or attempt == COMMIT_ATTEMPTS - 1:
                    raise OpsTableError(
                        f"ops table {where}: the write failed ({exc}). If the disk is full or "
                        "the folder is not writable (on a store: the bucket is out of reach or "
                        "the keys may not write), fix that and run again."
                    ) from exc
                time.sleep(0.05 * 2**attempt)
        table = locations.delta_table(where)
        if table.version() % CHECKPOINT_EVERY == 0:
            table.create_checkpoint()

    def read(self, where=None, columns: list[str] | None = None) -> list[dict]:
        return read(self.cfg, self.name, where=where, columns=columns)

    def append(self, rows: list[dict]) -> None:
        from deltalake import write_deltalake

        if rows:
            data = _arrow(self.name, rows)
            # merge: a table written by an older tidemark gains the newer columns
            self._commit(
                lambda table: write_deltalake(table, data, mode="append", schema_mode="merge")
            )

    def upsert(self, rows: list[dict], key: str) -> None:
        if rows:
            data = _arrow(self.name, rows)
            self._commit(
                lambda table: (
                    table.merge(
                        data, predicate=f"t.{key} = s.{key}", source_alias="s", target_alias="t"
                    )
                    .when_matched_update_all()
                    .when_not_matched_insert_all()
                    .execute()
                )
            )

    def delete(self, predicate: str) -> None:
        self._commit(lambda table: table.delete(predicate))

    def replace(self, rows: list[dict], predicate: str) -> None:
        """Replace the rows matching ``predicate`` with ``rows`` (which must match it too), in
        one commit: a reader sees either all the old rows or all the new ones."""
        from deltalake import write_deltalake

        data = _arrow(self.name, rows)
        present = set(locations.delta_table(path(self.cfg, self.name)).schema().to_arrow().names)
        if not set(data.schema.names) <= present:
            # a table written by an older tidemark gains the newer columns first
            self._commit(
                lambda table: write_deltalake(
                    table, data.slice(0, 0), mode="append", schema_mode="merge"
                )
            )
        self._commit(
            lambda table: write_deltalake(table, data, mode="overwrite", predicate=predicate)
        )

    def update(self, new_values: dict, predicate: str) -> None:
        self._commit(lambda table: table.update(new_values=new_values, predicate=predicate))

    def update_sql(self, updates: dict[str, str], predicate: str) -> None:
        """Set columns to SQL expressions (e.g. ``"NULL"``) on the rows matching ``predicate``."""
        self._commit(lambda table: table.update(updates=updates, predicate=predicate))


@contextmanager
def locked(cfg: TidemarkConfig, name: str):
    """Hold the table's writer lock for the block (waiting while another writer holds it);
    yields a `Locked` handle for reads and writes made under it."""
    ensure(cfg, name)
    with _lock(cfg, name) as held:
        yield Locked(cfg, name, held)


def ensure(cfg: TidemarkConfig, name: str) -> bool:
    """Create the table, empty, unless it exists; True if this call created it."""
    if exists(cfg, name):
        return False
    with _lock(cfg, name):
        if exists(cfg, name):
            return False
        _create(cfg, name)
        return True


def ensure_all(cfg: TidemarkConfig) -> list[str]:
    """Create every missing ops table, and give the existing ones the columns a newer tidemark
    declares (setup, the SQL endpoint and dbt do this up front, so dbt finds every column)."""
    created = [f"ops/{name}" for name in SCHEMAS if ensure(cfg, name)]
    for name in SCHEMAS:
        _add_missing_columns(cfg, name)
    return created


def _add_missing_columns(cfg: TidemarkConfig, name: str) -> None:
    from deltalake import write_deltalake

    def present() -> set[str]:
        return set(locations.delta_table(path(cfg, name)).schema().to_arrow().names)

    if set(arrow_schema(name).names) <= present():
        return
    with locked(cfg, name) as table:
        if not set(arrow_schema(name).names) <= present():
            table._commit(
                lambda t: write_deltalake(t, _arrow(name, []), mode="append", schema_mode="merge")
            )


def append(cfg: TidemarkConfig, name: str, rows: list[dict]) -> None:
    """Append ``rows`` (dicts by column; missing columns are null) in one commit."""
    if rows:
        with locked(cfg, name) as table:
            table.append(rows)


def upsert(cfg: TidemarkConfig, name: str, rows: list[dict], key: str) -> None:
    """Insert ``rows``, or replace the rows with the same ``key``, in one commit."""
    if rows:
        with locked(cfg, name) as table:
            table.upsert(rows, key)


def delete(cfg: TidemarkConfig, name: str, predicate: str) -> None:
    """Delete the rows matching the SQL ``predicate`` in one commit."""
    if exists(cfg, name):
        with locked(cfg, name) as table:
            table.delete(predicate)


def update(cfg: TidemarkConfig, name: str, new_values: dict, predicate: str) -> None:
    """Set columns to plain values on the rows matching ``predicate``, in one commit."""
    if exists(cfg, name):
        with locked(cfg, name) as table:
            table.update(new_values, predicate)


def version(cfg: TidemarkConfig, name: str) -> int | None:
    if not exists(cfg, name):
        return None
    return locations.delta_table(path(cfg, name)).version()


def literal(value) -> str:
    """``value`` as a SQL literal, for predicates over ops tables."""
    if value is None:
        return "null"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


def read(
    cfg: TidemarkConfig,
    name: str,
    where: str | None = None,
    columns: list[str] | None = None,
    as_of: int | None = None,
) -> list[dict]:
    """The table's rows as dicts (timestamps as UTC-aware datetimes); [] if it does not exist.

    ``where`` is a SQL predicate (DataFusion's dialect, through delta-rs), e.g.
    ``f"job = {literal(job)}"``. Columns an older table lacks read as null.
    """
    if not exists(cfg, name):
        return []
    from deltalake import QueryBuilder

    table = locations.delta_table(path(cfg, name), version=as_of)
    present = set(table.schema().to_arrow().names)
    wanted = columns or arrow_schema(name).names
    selected = [c for c in wanted if c in present]
    sql = f"select {', '.join(f'{chr(34)}{c}{chr(34)}' for c in selected)} from t"
    rows = pa.table(
        QueryBuilder().register("t", table).execute(sql + (f" where {where}" if where else ""))
    ).to_pylist()
    return [{c: row.get(c) for c in wanted} for row in rows]
