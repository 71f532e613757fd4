"""Reading a Delta table's transaction log directly, without Spark or delta-rs.

Two facts are needed in places that must not start a JVM (sensors, the progress flush, the dbt
entry point): the table's latest version, and which version a streaming batch committed. The
second is the version whose commit carries the batch's idempotency marker, a ``txn`` action
``{"appId": <writer>, "version": <batch id>}``: the Delta sink writes one per batch (app id =
the query id), and tidemark's foreachBatch writers write their own (see `lake`).

Only the JSON commit files are read (Delta keeps them for 30 days by default, checkpoints or
not), newest first, so the cost follows how far back the wanted batch is.
"""

from __future__ import annotations

import json
from pathlib import Path


def log_dir(table: Path) -> Path:
    return Path(table) / "_delta_log"


def commit_versions(table: Path) -> list[int]:
    """The versions whose JSON commit file is present, ascending."""
    folder = log_dir(table)
    if not folder.is_dir():
        return []
    return sorted(int(p.stem) for p in folder.glob("*.json") if p.stem.isdigit())


def latest_version(table: Path) -> int | None:
    """The table's newest version, or None when there is no table."""
    versions = commit_versions(table)
    return versions[-1] if versions else None


def commit_actions(table: Path, version: int) -> list[dict]:
    path = log_dir(table) / f"{version:020d}.json"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def txn_of(table: Path, version: int, app_id: str) -> int | None:
    """The batch id ``app_id`` recorded in commit ``version``, if that commit has its marker."""
    for action in commit_actions(table, version):
        txn = action.get("txn")
        if txn and txn.get("appId") == app_id:
            return int(txn["version"])
    return None


def version_of_batch(table: Path, app_id: str, batch_id: int,
                     newer_than: int | None = None) -> int | None:
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


def version_as_of_batch(table: Path, app_id: str, batch_id: int, sink_version: int) -> int:
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
