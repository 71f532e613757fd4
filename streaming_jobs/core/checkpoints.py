"""A streaming checkpoint, without Spark: its identity, its batches, and who owns it.

Reading: `query_id` (the checkpoint's identity), `last_committed_batch`, `last_planned_batch`.

Ownership: exactly one run at a time may drive a checkpoint. The lock is an ``flock`` on
``checkpoints/<query>.lock``. The operating system releases it when its holder exits, however
it exits, so a crashed run never leaves a stale lock behind. The file also says who holds it
(run, process, host, since when, whether it answers savepoint requests), for the refusal
message and for savepoint requests.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path


def _batch_ids(folder: Path) -> list[int]:
    if not folder.is_dir():
        return []
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())


BRONZE_QUERY_PREFIX = "bronze_"


def query_name(stream: str) -> str:
    """The name (and checkpoint folder) of ``stream``'s ingestion query: ``bronze_<stream>``."""
    return f"{BRONZE_QUERY_PREFIX}{stream}"


def stream_of(query: str) -> str | None:
    """The stream an ingestion query ingests; None for a job's query."""
    return (
        query.removeprefix(BRONZE_QUERY_PREFIX) if query.startswith(BRONZE_QUERY_PREFIX) else None
    )


def last_committed_batch(checkpoint: Path) -> int | None:
    ids = _batch_ids(checkpoint / "commits")
    return ids[-1] if ids else None


def last_planned_batch(checkpoint: Path) -> int | None:
    ids = _batch_ids(checkpoint / "offsets")
    return ids[-1] if ids else None


# How often Spark's state store maintenance runs in tidemark's processes (spark.py): it uploads
# the RocksDB snapshots that commits made, and a snapshot not uploaded when the process ends is
# lost.
STATE_MAINTENANCE_SECONDS = 10
# Spark's spark.sql.streaming.stateStore.minDeltasForSnapshot default: a commit makes a snapshot
# once it is this many versions past the last uploaded one.
MIN_DELTAS_FOR_SNAPSHOT = 10


def _store_version(name: str) -> int | None:
    """A state store file's version: ``12.changelog``, ``12.zip``, ``12_<id>.zip``."""
    head = name.split(".", 1)[0].split("_", 1)[0]
    return int(head) if head.isdigit() else None


def snapshots_pending(
    checkpoint: Path, since: float, min_deltas: int = MIN_DELTAS_FOR_SNAPSHOT
) -> list[Path]:
    """The state stores of ``checkpoint`` with a snapshot made and not uploaded yet.

    A store committed to after ``since`` (a changelog written since) whose newest changelog is
    ``min_deltas`` or more versions past its newest uploaded snapshot made a snapshot at that
    commit (Spark compares with the last uploaded snapshot when it loads a store); the state
    store's maintenance uploads it. Until then, a process that ends loses it, and the next run
    of the job replays every changelog since the last uploaded snapshot.
    """
    pending = []
    state = checkpoint / "state"
    if not state.is_dir():
        return pending
    for store in {p.parent for p in state.rglob("*.changelog")}:
        changelogs, snapshots = [], [0]
        for entry in store.iterdir():
            version = _store_version(entry.name)
            if version is None:
                continue
            if entry.name.endswith(".changelog"):
                try:
                    if entry.stat().st_mtime >= since:
                        changelogs.append(version)
                except FileNotFoundError:  # removed by the store's own cleanup meanwhile
                    continue
            elif entry.name.endswith(".zip"):
                snapshots.append(version)
        if changelogs and max(changelogs) - max(snapshots) >= min_deltas:
            pending.append(store)
    return sorted(pending)


def query_id(checkpoint: Path) -> str | None:
    """The query's id, written in ``metadata`` when the checkpoint is created.

    It is the checkpoint's identity: a checkpoint deleted and created again, or restored from a
    savepoint (which gets a new id), is a new query. Sinks key their idempotent writes by it.
    """
    try:
        return json.loads((checkpoint / "metadata").read_text())["id"]
    except (OSError, ValueError, KeyError):
        return None


class CheckpointBusy(RuntimeError):
    """Another run owns the checkpoint; the message says which and what to do."""


def lock_path(checkpoint: Path) -> Path:
    return checkpoint.with_name(f"{checkpoint.name}.lock")


def owner(checkpoint: Path) -> dict | None:
    """Who holds (or last held) the lock, as written by the holder."""
    try:
        return json.loads(lock_path(checkpoint).read_text() or "null")
    except (OSError, ValueError):
        return None


def is_running(checkpoint: Path) -> bool:
    """True when a run holds the checkpoint's lock (see `locks`)."""
    path = lock_path(checkpoint)
    if not path.exists():
        return False
    with open(path) as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


def takes_savepoint_requests(checkpoint: Path) -> bool:
    """True when the checkpoint's current owner answers savepoint requests (a continuous run)."""
    held = owner(checkpoint) or {}
    return bool(held.get("takes_savepoint_requests")) and is_running(checkpoint)


def clear_temp_files(checkpoint: Path) -> list[str]:
    """Remove the temporary files a writer killed mid-write left in the checkpoint's logs
    (``offsets/.0.<uuid>.tmp``: Spark writes a log file under a hidden name, then renames it).
    Found by the fault harness (docs/reliability.md): with one left in ``offsets/`` before the first
    commit, Spark 4.2 refuses to start the query, forever (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY,
    "offsets should be empty on batch 0"). Only the lock's holder writes there, so under the
    lock every such file is a dead writer's. Returns what was removed."""
    removed = []
    for folder in ("offsets", "commits"):
        for path in (checkpoint / folder).glob(".*"):
            if path.is_file() and path.name.endswith((".tmp", ".tmp.crc")):
                path.unlink(missing_ok=True)
                removed.append(f"{folder}/{path.name}")
    return removed


@contextmanager
def checkpoint_lock(checkpoint: Path, holder: str, *, takes_savepoint_requests: bool = False):
    """Hold ``checkpoint``'s lock for the block, or raise `CheckpointBusy` at once.

    ``takes_savepoint_requests``: the holder answers savepoint requests while it holds the lock
    (recorded in the lock file, for `savepoints.request`'s callers).
    """
    path = lock_path(checkpoint)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+")  # noqa: SIM115 - held for the block
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            held = owner(checkpoint) or {}
            raise CheckpointBusy(
                f"checkpoint {checkpoint} is owned by {held.get('holder', 'another run')} "
                f"(pid {held.get('pid', '?')} on {held.get('host', '?')}, since "
                f"{held.get('since', '?')}); exactly one run may drive a job's checkpoint. "
                "Stop that run first (terminate it in Dagster, or Ctrl-C the command), then "
                "start this one again."
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(
            json.dumps(
                {
                    "holder": holder,
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                    "since": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    "takes_savepoint_requests": takes_savepoint_requests,
                }
            )
        )
        handle.flush()
        clear_temp_files(checkpoint)  # a killed holder's half-written log files
        yield
    finally:
        handle.close()  # releases the flock
