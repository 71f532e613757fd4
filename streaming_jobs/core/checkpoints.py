"""A streaming checkpoint, without Spark: its identity, its batches, and who owns it.

Reading: `query_id` (the checkpoint's identity), `last_committed_batch`, `last_planned_batch`,
`batch_input` (what a planned batch reads).

A checkpoint is a local folder or a prefix on an object store (`streaming_jobs.core.locations`):
every reading here works on both.

Ownership: exactly one run at a time may drive a checkpoint.
- On a local disk the lock is an ``flock`` on ``checkpoints/<query>.lock``. The operating system
  releases it when its holder exits, however it exits, so a crashed run never leaves a stale
  lock behind, and a paused holder keeps it (no one can take it meanwhile). The file also says
  who holds it (run, process, host, since when, whether it answers savepoint requests), for the
  refusal message and for savepoint requests.
- On an object store it is a lease, ``checkpoints/<query>.lease`` (`streaming_jobs.core.leases`):
  taken and renewed by conditional puts, taken over when its holder stops renewing, and
  carrying a fencing token that its holder checks before each commit.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import socket
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from streaming_jobs.core import locations
from streaming_jobs.core.leases import Lease, LeaseHeld, holder_gone_here
from streaming_jobs.core.locations import Location


Where = Path | Location


def batch_ids(folder: Where) -> list[int]:
    """The batch ids of a checkpoint log folder (``offsets``, ``commits``), oldest first."""
    return sorted(int(n) for n in locations.names(Location.of(folder)) if n.isdigit())


def log_file_error(path: Location) -> str | None:
    """Why a checkpoint log file (``v1`` then JSON lines) cannot be read, or None."""
    try:
        lines = locations.read_text(path).splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        return f"{path.name}: unreadable ({type(exc).__name__})"
    if not lines or not lines[0].startswith("v"):
        return f"{path.parent.name}/{path.name}: no version header (truncated or overwritten)"
    try:
        for line in lines[1:]:
            json.loads(line)
    except ValueError:
        return f"{path.parent.name}/{path.name}: not valid JSON"
    return None


BRONZE_QUERY_PREFIX = "bronze_"


def query_name(stream: str) -> str:
    """The name (and checkpoint folder) of ``stream``'s ingestion query: ``bronze_<stream>``."""
    return f"{BRONZE_QUERY_PREFIX}{stream}"


def stream_of(query: str) -> str | None:
    """The stream an ingestion query ingests; None for a job's query."""
    return (
        query.removeprefix(BRONZE_QUERY_PREFIX) if query.startswith(BRONZE_QUERY_PREFIX) else None
    )


def last_committed_batch(checkpoint: Where) -> int | None:
    ids = batch_ids(Location.of(checkpoint) / "commits")
    return ids[-1] if ids else None


def last_planned_batch(checkpoint: Where) -> int | None:
    ids = batch_ids(Location.of(checkpoint) / "offsets")
    return ids[-1] if ids else None


def committed_batches(checkpoint: Where) -> list[int]:
    """The batch ids in ``commits/``, oldest first (Spark keeps the newest 100 or so)."""
    return batch_ids(Location.of(checkpoint) / "commits")


def batch_metadata(checkpoint: Where, batch: int) -> dict | None:
    """A planned batch's metadata line in ``offsets/<batch>`` (``batchWatermarkMs``: the
    watermark the batch ran with; ``batchTimestampMs``: its trigger's time), or None."""
    try:
        lines = locations.read_text(Location.of(checkpoint) / "offsets" / str(batch)).splitlines()
        return json.loads(lines[1])
    except (FileNotFoundError, IndexError, ValueError):
        return None


def batch_offsets(checkpoint: Where, batch: int) -> list[dict] | None:
    """A planned batch's end offset per source (see `_offsets`), or None when it is gone."""
    return _offsets(Location.of(checkpoint), batch)


def _offsets(checkpoint: Location, batch: int) -> list[dict] | None:
    """A planned batch's source offsets (``offsets/<batch>``: a version line, the batch's
    metadata, then one line per source), or None when it is not there."""
    try:
        text = locations.read_text(checkpoint / "offsets" / str(batch))
    except FileNotFoundError:
        return None
    out = []
    for line in text.splitlines()[2:]:
        try:
            out.append(json.loads(line))
        except ValueError:
            out.append({})  # a source with no offset yet ("-")
    return out


def _files_of_batch(checkpoint: Location, source: int, batch: int) -> list[str]:
    """The files a file source's batch reads, from its log (``sources/<i>/<batch>``, or the
    compaction file holding it)."""
    log = checkpoint / "sources" / str(source)
    names = [n for n in locations.names(log) if n.split(".")[0].isdigit()]
    own = [n for n in names if n == str(batch)] or sorted(
        (n for n in names if n.endswith(".compact") and int(n.split(".")[0]) >= batch),
        key=lambda n: int(n.split(".")[0]),
    )[:1]
    files = []
    for name in own:
        for line in locations.read_text(log / name).splitlines()[1:]:
            try:
                info = json.loads(line)
            except ValueError:
                continue
            if int(info.get("batchId", -1)) == batch:
                files.append(locations.from_spark_uri(info["path"]))
    return files


def _versions_read(start: dict, end: dict) -> tuple[int, int]:
    """The versions a Delta source's batch reads, first and last (last < first: none). An offset
    (version, index) reads what lies before it, and index -1 is the start of that version."""
    first = start.get("reservoirVersion", 0)
    return first, end["reservoirVersion"] - (1 if end.get("index", -1) == -1 else 0)


def delta_reads(checkpoint: Where, batch: int) -> dict[str, tuple[int, int]]:
    """The Delta versions a planned batch reads, by table id (`_versions_read`); empty when its
    offsets are gone or it reads no Delta table."""
    checkpoint = Location.of(checkpoint)
    now = _offsets(checkpoint, batch) or []
    before = _offsets(checkpoint, batch - 1) or []
    return {
        end["reservoirId"]: _versions_read(start, end)
        for start, end in zip(before + [{}] * len(now), now)
        if "reservoirVersion" in end and "reservoirId" in end
    }


def batch_input(checkpoint: Where, batch: int) -> list[str]:
    """What a planned batch reads, per source, in words (empty when its offsets are gone): the
    files of a file source, the versions of a Delta table, the offsets of a Kafka topic. A row
    that fails the batch every time is in there."""
    checkpoint = Location.of(checkpoint)
    now = _offsets(checkpoint, batch)
    if now is None:
        return []
    before = _offsets(checkpoint, batch - 1) or [{}] * len(now)
    said = []
    for i, (start, end) in enumerate(zip(before + [{}] * len(now), now)):
        if "logOffset" in end:
            files = sorted(_files_of_batch(checkpoint, i, batch))
            shown = ", ".join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
            said.append(f"{len(files)} landed file(s): {shown}" if files else "no landed file")
        elif "reservoirVersion" in end:
            first, last = _versions_read(start, end)
            table = f"Delta table {end.get('reservoirId', '?')}"
            if last < first:
                said.append(
                    f"{table}: no new version (a batch that moves time on: it emits what the "
                    "query's state holds from earlier batches)"
                )
            elif first == last:
                said.append(f"{table} version {first}")
            else:
                said.append(f"{table} versions {first} to {last}")
        elif end:  # Kafka: {topic: {partition: offset}}
            for topic, parts in end.items():
                if not isinstance(parts, dict):
                    continue
                ranges = ", ".join(
                    f"{p}: {start.get(topic, {}).get(p, 0)} to {o}"
                    for p, o in sorted(parts.items())
                )
                said.append(f"topic {topic} offsets (partition: from to) {ranges}")
    return said


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
    checkpoint: Where, since: float, min_deltas: int = MIN_DELTAS_FOR_SNAPSHOT
) -> list[Location]:
    """The state stores of ``checkpoint`` with a snapshot made and not uploaded yet.

    A store committed to after ``since`` (a changelog written since) whose newest changelog is
    ``min_deltas`` or more versions past its newest uploaded snapshot made a snapshot at that
    commit (Spark compares with the last uploaded snapshot when it loads a store); the state
    store's maintenance uploads it. Until then, a process that ends loses it, and the next run
    of the job replays every changelog since the last uploaded snapshot.
    """
    state = Location.of(checkpoint) / "state"
    stores: dict[str, tuple[list[int], list[int]]] = {}
    for entry in locations.entries(state):
        folder, _, name = entry.relative.rpartition("/")
        version = _store_version(name)
        if version is None:
            continue
        changelogs, snapshots = stores.setdefault(folder, ([], [0]))
        if name.endswith(".changelog") and entry.modified >= since:
            changelogs.append(version)
        elif name.endswith(".zip"):
            snapshots.append(version)
    return sorted(
        (
            state / folder
            for folder, (changelogs, snapshots) in stores.items()
            if changelogs and max(changelogs) - max(snapshots) >= min_deltas
        ),
        key=str,
    )


def query_id(checkpoint: Where) -> str | None:
    """The query's id, written in ``metadata`` when the checkpoint is created.

    It is the checkpoint's identity: a checkpoint deleted and created again, or restored from a
    savepoint (which gets a new id), is a new query. Sinks key their idempotent writes by it.
    """
    try:
        return json.loads(locations.read_text(Location.of(checkpoint) / "metadata"))["id"]
    except (OSError, ValueError, KeyError):
        return None


def bronze_app_id(identity: str) -> str:
    """The key an ingestion query with id ``identity`` (`query_id`) writes its batches to
    bronze and quarantine with (Delta's ``txnAppId``)."""
    return f"tidemark.bronze.{identity}"


class CheckpointBusy(RuntimeError):
    """Another run owns the checkpoint; the message says which and what to do."""


def lock_path(checkpoint: Path) -> Path:
    return checkpoint.with_name(f"{checkpoint.name}.lock")


def lease_location(checkpoint: Where) -> Location:
    """Where a checkpoint on a store keeps its lease: beside it, as ``<query>.lease``."""
    place = Location.of(checkpoint)
    return place.with_name(f"{place.name}.lease")


def _lease(checkpoint: Location, holder: str, **info) -> Lease:
    place = lease_location(checkpoint)
    return Lease(locations.store_of(place), place.key, holder, info=info)


def owner(checkpoint: Where) -> dict | None:
    """Who holds (or last held) the lock, as written by the holder."""
    place = Location.of(checkpoint)
    if place.on_store:
        record, _ = _lease(place, "reader").read()
        return record
    try:
        return json.loads(lock_path(place.path).read_text() or "null")
    except (OSError, ValueError):
        return None


def is_running(checkpoint: Where) -> bool:
    """True when a run holds the checkpoint's lock (see `locks`).

    On a store: a lease that is not released and whose holder is not known gone (a holder on
    another machine that died counts as running until its lease's term has passed without a
    renewal, which only a contender waits to see).
    """
    place = Location.of(checkpoint)
    if place.on_store:
        record = owner(place)
        return bool(record) and not record.get("released") and not holder_gone_here(record)
    return locations.lock_held(lock_path(place.path))


def takes_savepoint_requests(checkpoint: Where) -> bool:
    """True when the checkpoint's current owner answers savepoint requests (a continuous run)."""
    held = owner(checkpoint) or {}
    return bool(held.get("takes_savepoint_requests")) and is_running(checkpoint)


# a state schema file Spark names in an operator's metadata: its checkpoint's root, then this
_SCHEMA_FILE = re.compile(r"^.*?(/state/\d+/_stateSchema/.+)$")


def relocate_state_schemas(checkpoint: Where) -> int:
    """Point each state schema file an operator's metadata names at ``checkpoint``'s own copy.

    A keyed-state operator (transformWithState) writes metadata of format v2
    (``state/<operator>/_metadata/v2/<batch>``) naming its schema files by absolute path. A
    checkpoint copied elsewhere (a rebuild's shadow swapped in, a savepoint restored) would go
    on reading the files where it was made, and its query fails once they are gone. Run after
    each such copy, before the copy's ``metadata`` is written; repeating it changes nothing.
    Returns how many metadata files were rewritten."""
    checkpoint = Location.of(checkpoint)
    spark = checkpoint.spark.rstrip("/")
    root = spark if "://" in spark else "file:" + os.path.abspath(spark)
    rewritten = 0
    for operator in locations.names(checkpoint / "state"):
        folder = checkpoint / "state" / operator / "_metadata" / "v2"
        for name in locations.names(folder):
            if name.startswith("."):  # Hadoop's checksum of a file (.<name>.crc)
                continue
            text = locations.read_text(folder / name)
            head, _, body = text.partition("\n")
            if head.strip() != "v2" or not body.strip():
                continue
            metadata = json.loads(body)
            changed = False
            for store in metadata.get("stateStoreInfo") or []:
                paths = store.get("stateSchemaFilePaths") or []
                moved = [
                    root + found.group(1) if (found := _SCHEMA_FILE.match(path)) else path
                    for path in paths
                ]
                if moved != paths:
                    store["stateSchemaFilePaths"], changed = moved, True
            if changed:
                # the old checksum would fail the new text: without one, Hadoop reads unchecked
                locations.delete(folder / f".{name}.crc")
                locations.write_bytes(
                    folder / name, f"v2\n{json.dumps(metadata, separators=(',', ':'))}".encode()
                )
                rewritten += 1
    return rewritten


def clear_temp_files(checkpoint: Where) -> list[str]:
    """Remove the temporary files a writer killed mid-write left in the checkpoint's logs
    (``offsets/.0.<uuid>.tmp``: Spark writes a log file under a hidden name, then renames it).
    Found by the fault harness (docs/reliability.md): with one left in ``offsets/`` before the first
    commit, Spark 4.2 refuses to start the query, forever (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY,
    "offsets should be empty on batch 0"). Only the lock's holder writes there, so under the
    lock every such file is a dead writer's. Returns what was removed."""
    place, removed = Location.of(checkpoint), []
    for folder in ("offsets", "commits"):
        for name in locations.names(place / folder):
            if name.startswith(".") and name.endswith((".tmp", ".tmp.crc")):
                locations.delete(place / folder / name)
                removed.append(f"{folder}/{name}")
    return removed


class _Held:
    """What `checkpoint_lock` gives its block: `check` before a commit raises `Fenced` when
    the checkpoint's lease was lost (a lock on a local disk cannot be lost while held)."""

    def __init__(self, lease: Lease | None = None) -> None:
        self.lease = lease

    def check(self) -> None:
        if self.lease is not None:
            self.lease.check()


# checkpoint url -> the lease this process holds on it (store checkpoints only), for the
# sinks' check before each commit (`still_owned`)
_HELD_HERE: dict[str, Lease] = {}


def still_owned(checkpoint: Where) -> None:
    """Before a sink commits a batch: raise `Fenced` when this process held ``checkpoint``'s
    lease and lost it (its term ran out while paused, or another process took it over). A
    checkpoint on a local disk, or not held here, passes: its flock cannot be lost."""
    lease = _HELD_HERE.get(Location.of(checkpoint).url)
    if lease is not None:
        lease.check()


def _refusal(checkpoint: Where, held: dict) -> CheckpointBusy:
    return CheckpointBusy(
        f"checkpoint {checkpoint} is owned by {held.get('holder', 'another run')} "
        f"(pid {held.get('pid', '?')} on {held.get('host', '?')}, since "
        f"{held.get('since', '?')}); exactly one run may drive a job's checkpoint. "
        "Stop that run first (terminate it in Dagster, or Ctrl-C the command), then "
        "start this one again."
    )


@contextmanager
def checkpoint_lock(checkpoint: Where, holder: str, *, takes_savepoint_requests: bool = False):
    """Hold ``checkpoint``'s lock for the block, or raise `CheckpointBusy` (at once on a local
    disk; on a store, once a live holder is seen renewing, or after waiting out a dead holder's
    term on another machine, which is then taken over).

    ``takes_savepoint_requests``: the holder answers savepoint requests while it holds the lock
    (recorded with the lock, for `savepoints.request`'s callers).
    """
    place = Location.of(checkpoint)
    since = datetime.now(timezone.utc).isoformat(timespec="seconds")
    if place.on_store:
        lease = _lease(
            place, holder, since=since, takes_savepoint_requests=takes_savepoint_requests
        )
        try:
            lease.__enter__()
        except LeaseHeld:
            raise _refusal(place, owner(place) or {}) from None
        _HELD_HERE[place.url] = lease
        try:
            clear_temp_files(place)  # a killed holder's half-written log files
            yield _Held(lease)
        finally:
            _HELD_HERE.pop(place.url, None)
            lease.__exit__(None, None, None)
        return
    path = lock_path(place.path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+")  # noqa: SIM115 - held for the block
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _refusal(place, owner(place) or {}) from None
        handle.seek(0)
        handle.truncate()
        handle.write(
            json.dumps(
                {
                    "holder": holder,
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                    "since": since,
                    "takes_savepoint_requests": takes_savepoint_requests,
                }
            )
        )
        handle.flush()
        clear_temp_files(place)  # a killed holder's half-written log files
        yield _Held()
    finally:
        handle.close()  # releases the flock
