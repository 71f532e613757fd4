"""Reading a Delta table's transaction log directly, without Spark or delta-rs.

Two facts are needed in places that must not start a JVM (sensors, the progress flush, the dbt
entry point): the table's latest version, and which version a streaming batch committed. The
second is the version whose commit carries the batch's idempotency marker, a ``txn`` action
``{"appId": <writer>, "version": <batch id>}``: the Delta sink and ``txnAppId`` writes put one in
each batch's commit (app id = the query id), and tidemark's own marker, the same pair in the
commit's ``userMetadata`` (`batch_written`, `lake.append_marked`), stands for it where Delta's
lookup costs too much. A third comes from the commits since a version: the statistics of the
files they added (the earliest new event, the least ingestion batch), which incremental
reconciliation and retention's progress fold use to read only what is new.

A table is a local folder or a place on an object store (`streaming_jobs.core.locations`).
Only the JSON commit files are read (Delta keeps them for 30 days by default, checkpoints or
not), newest first, so the cost follows how far back the wanted batch is.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from typing import TYPE_CHECKING

from streaming_jobs.core import locations
from streaming_jobs.core.locations import Location, Where

if TYPE_CHECKING:
    from streaming_jobs.spec import JobSpec

# how many of a table's newest commits are searched for its newest ingestion batch
NEWEST_BATCH_LOOKBACK = 50


def log_dir(table: Path) -> Path:
    return Path(table) / "_delta_log"


def _log(table: Where) -> Location:
    return Location.of(table) / "_delta_log"


def commit_versions(table: Where) -> list[int]:
    """The versions whose JSON commit file is present, ascending."""
    return sorted(
        int(name[: -len(".json")])
        for name in locations.names(_log(table))
        if name.endswith(".json") and name[: -len(".json")].isdigit()
    )


def latest_version(table: Where) -> int | None:
    """The table's newest version, or None when there is no table."""
    versions = commit_versions(table)
    return versions[-1] if versions else None


def holds_no_rows(table: Where) -> bool:
    """True when the table is missing, or its whole log (no checkpoint: every commit is
    there) adds no file with a row: a lake table made empty before its stream first ran."""
    names = locations.names(_log(table))
    if any(".checkpoint." in name for name in names):
        return False
    for version in commit_versions(table):
        for action in commit_actions(table, version):
            added = action.get("add")
            if added is None:
                continue
            stats = json.loads(added.get("stats") or "{}")
            if stats.get("numRecords", 1) > 0:  # no statistics: it may hold rows
                return False
    return True


def commit_actions(table: Where, version: int) -> list[dict]:
    text = locations.read_text(_log(table) / f"{version:020d}.json")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


# Commits that write rows, and the operation metrics that count them (OPTIMIZE and VACUUM
# rewrite or remove files: they add no row)
ROW_WRITES = {
    "WRITE": ("numOutputRows",),
    "STREAMING UPDATE": ("numOutputRows",),
    "MERGE": ("numTargetRowsInserted", "numTargetRowsUpdated"),
}


def rows_written(table: Where, after: int) -> tuple[int, int]:
    """Rows appended or upserted by the commits after version ``after`` (their commitInfo's
    operation metrics: the Delta sink and foreachBatch report no row count), and the newest
    version read (``after`` when there is none)."""
    total, newest = 0, after
    for version in commit_versions(table):
        if version <= after:
            continue
        newest = version
        for action in commit_actions(table, version):
            info = action.get("commitInfo")
            if info:
                metrics = info.get("operationMetrics") or {}
                total += sum(
                    int(metrics.get(m, 0)) for m in ROW_WRITES.get(info.get("operation"), ())
                )
    return total, newest


def changed_outside_its_writer(table: Where, since: dt.datetime) -> str | None:
    """The newest commit after ``since`` that changed the table's rows without a streaming
    writer's transaction marker (a DELETE, UPDATE, RESTORE or write by hand), described; None
    when there is none. A job's own commits (the Delta sink, its idempotent MERGE) carry a
    ``txn`` action, or tidemark's marker (`AppendBatch`); OPTIMIZE and VACUUM change no data
    (``dataChange`` false, or no file)."""
    since_ms = since.timestamp() * 1000
    for version in reversed(commit_versions(table)):
        actions = commit_actions(table, version)
        info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        if info.get("timestamp", 0) <= since_ms:
            return None  # every later one was checked
        if any("txn" in a or _own_marker(a) for a in actions):
            continue
        changed = [
            a
            for a in actions
            for kind in ("add", "remove")
            if kind in a and a[kind].get("dataChange", True)
        ]
        if changed:
            when = dt.datetime.fromtimestamp(info.get("timestamp", 0) / 1000, dt.timezone.utc)
            return (
                f"version {version}, {info.get('operation', 'a commit')} at "
                f"{when:%Y-%m-%d %H:%M:%S} UTC"
            )
    return None


# tidemark's own idempotency marker, in a commit's ``userMetadata`` (`lake.append_marked`)
MARKER = "tidemark_txn"
# How far before a batch's trigger time its commit may carry an earlier timestamp (a clock
# stepped back between the two): commits older than that cannot hold the batch
CLOCK_MARGIN_MS = 10 * 60 * 1000


def marker_metadata(app_id: str, batch_id: int) -> str:
    """The ``userMetadata`` of a commit writing ``app_id``'s batch ``batch_id``."""
    return json.dumps({MARKER: {"appId": app_id, "version": batch_id}})


def _own_marker(action: dict) -> dict | None:
    """tidemark's marker in a ``commitInfo`` action (``{"appId": ..., "version": ...}``)."""
    metadata = (action.get("commitInfo") or {}).get("userMetadata")
    if not metadata or MARKER not in metadata:
        return None
    try:
        mark = json.loads(metadata)[MARKER]
    except (ValueError, TypeError, KeyError):
        return None
    return mark if isinstance(mark, dict) and "appId" in mark and "version" in mark else None


def _marker(action: dict, app_id: str) -> int | None:
    """The batch id ``app_id`` recorded in one action: Delta's ``txn``, or tidemark's marker
    in the ``commitInfo``."""
    mark = action.get("txn") or _own_marker(action)
    if mark and mark.get("appId") == app_id:
        return int(mark["version"])
    return None


def batch_marks(table: Where) -> list[tuple[str, int]]:
    """Every (writer, batch) marker in the table's commits, one entry per commit that holds it:
    a batch written twice appears twice."""
    found = []
    for version in commit_versions(table):
        marks = {
            (mark["appId"], int(mark["version"]))
            for mark in (a.get("txn") or _own_marker(a) for a in commit_actions(table, version))
            if mark
        }
        found += sorted(marks)
    return found


def _marker_in(actions: list[dict], app_id: str) -> int | None:
    marks = [m for m in (_marker(a, app_id) for a in actions) if m is not None]
    return max(marks) if marks else None


def txn_of(table: Where, version: int, app_id: str) -> int | None:
    """The batch id ``app_id`` recorded in commit ``version``, if that commit has its marker."""
    return _marker_in(commit_actions(table, version), app_id)


def merge_app_id(query_id: str) -> str:
    """The idempotency key of an update-mode job's MERGEs: its checkpoint's identity."""
    return f"tidemark.gold.{query_id}"


def sink_app_id(spec: JobSpec, query_id: str) -> str:
    """Who marks the job's commits in its gold table's log: an append-mode job's writer (the
    Delta sink or `AppendBatch`) marks them with the query id, an update-mode job's MERGE with
    `merge_app_id`."""
    return query_id if spec.output_mode == "append" else merge_app_id(query_id)


def batch_written(table: Where, app_id: str, batch_id: int, since_ms: int | None) -> bool:
    """Whether ``app_id`` committed ``batch_id`` (or a later batch) to the table: the check
    that makes a replayed batch write nothing twice, read from the newest commits.

    ``app_id`` writes its batches in order, so its newest commit decides. The search stops
    there, or at the first commit older than ``since_ms`` (the batch's trigger time, less
    `CLOCK_MARGIN_MS`): a batch is committed after it was triggered. Only the batch's writer
    may call this, holding its checkpoint's lock (no one else writes ``app_id``'s batches).
    """
    for version in reversed(commit_versions(table)):
        actions = commit_actions(table, version)
        mark = _marker_in(actions, app_id)
        if mark is not None:
            return mark >= batch_id
        info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        if since_ms is not None and info.get("timestamp", since_ms) < since_ms - CLOCK_MARGIN_MS:
            return False
    return False


def version_of_batch(
    table: Where, app_id: str, batch_id: int, newer_than: int | None = None
) -> int | None:
    """The newest table version holding everything ``app_id`` wrote up to ``batch_id``.

    That is the commit whose marker is ``batch_id``; a batch that committed nothing (a replay
    Delta skipped) is covered by the newest commit with an older marker. None when the writer
    has no commit at or before ``batch_id`` among the versions after ``newer_than``.
    """
    for version in reversed(commit_versions(table)):
        if newer_than is not None and version <= newer_than:
            return None
        marker = txn_of(table, version, app_id)
        if marker is not None and marker <= batch_id:
            return version
    return None


def version_as_of_batch(table: Where, app_id: str, batch_id: int, sink_version: int) -> int:
    """The table as the stream left it at ``batch_id``, plus whatever others wrote since.

    ``sink_version`` holds the batch. Later commits are included up to (not including) the
    writer's first commit of a later batch: a write by someone else (a repair, a tampering, a
    compaction) is visible to reconciliation at once, a batch whose progress is not recorded
    yet is not.
    """
    pinned = sink_version
    for version in commit_versions(table):
        if version <= sink_version:
            continue
        marker = txn_of(table, version, app_id)
        if marker is not None and marker > batch_id:
            break
        pinned = version
    return pinned


# -- file statistics of the commits since a version (no data is read) ------------------------


class StatsUnknown(Exception):
    """What the log cannot tell: a version's commit is gone, or a file has no statistics."""


def new_file_stats(table: Where, version: int):
    """The statistics of each file bronze version ``version`` added with new rows. Files
    rewritten without new rows (OPTIMIZE: dataChange false) are not new. StatsUnknown when the
    version's log is gone."""
    try:
        actions = commit_actions(table, version)
    except OSError:
        raise StatsUnknown(f"{table.name}: the log of version {version} is gone")
    for action in actions:
        add = action.get("add")
        if not add or not add.get("dataChange", True):
            continue
        stats = json.loads(add.get("stats") or "{}")
        if stats.get("numRecords") != 0:
            yield version, stats


def file_stat(
    stats: tuple[int, dict], kind: str, column: str, table: Where, no_nulls: bool = False
):
    """One file's ``minValues`` or ``maxValues`` of ``column``; StatsUnknown when the file has
    none or (``no_nulls``) holds nulls in the column."""
    version, found = stats
    value = (found.get(kind) or {}).get(column)
    if value is None or (no_nulls and (found.get("nullCount") or {}).get(column, 1)):
        raise StatsUnknown(
            f"{table.name}: a file of version {version} has no statistics for {column}"
        )
    return value


def new_file_minimum(
    table: Where, after: int, upto: int, column: str, parse, no_nulls: bool = False
):
    """The least ``column`` value (``parse``d) in the files bronze versions (after, upto]
    added, from their statistics (no data is read); None when they added no rows."""
    values = [
        parse(file_stat(stats, "minValues", column, table, no_nulls))
        for version in range(after + 1, upto + 1)
        for stats in new_file_stats(table, version)
    ]
    return min(values, default=None)


def new_file_maximum(table: Where, version: int, column: str) -> int | None:
    """The greatest ``column`` value (an integer) in the files version ``version`` added with
    new rows; None when it added none."""
    return max(
        (
            int(file_stat(stats, "maxValues", column, table))
            for stats in new_file_stats(table, version)
        ),
        default=None,
    )


def earliest_new_event(table: Where, after: int, upto: int, column: str) -> dt.datetime | None:
    """The earliest event time (``column``) among the rows bronze versions (after, upto] added."""
    return new_file_minimum(
        table,
        after,
        upto,
        column,
        lambda low: dt.datetime.fromisoformat(low.replace("Z", "+00:00")),
    )


def ingest_batch_floor(table: Where, after: int) -> int | None:
    """The least ``_ingest_batch_id`` among the rows bronze added after version ``after``
    (up to its latest version now), or None when that is unknown. Every row committed after
    ``after`` carries an ingestion batch id at least this, and bronze's files have statistics
    for it: the lateness replay of those rows skips the older files. When nothing was added
    since, it is one past the newest batch's id: rows that arrive while dbt runs have higher
    ids (unless the ingestion's checkpoint is reset meanwhile; they are then missing from that
    run's count of rows not yet read, and only there)."""
    latest = latest_version(table)
    if latest is None:
        return None
    try:
        floor = new_file_minimum(table, after, latest, "_ingest_batch_id", int, no_nulls=True)
        if floor is not None:
            return floor
        # nothing new: one past the newest ingestion batch, from the last commit that added rows
        for version in range(latest, max(latest - NEWEST_BATCH_LOOKBACK, -1), -1):
            newest = new_file_maximum(table, version, "_ingest_batch_id")
            if newest is not None:
                return newest + 1
    except StatsUnknown:
        pass
    return None
