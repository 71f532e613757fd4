"""Mend a checkpoint whose newest log file is torn (`tidemark repair QUERY`): an ingestion's
(``bronze_<stream>``) or a job's.

A checkpoint's log is its sources' positions (``offsets/N``), the batches it finished
(``commits/N``) and its identity (``metadata``, which keys its idempotent writes). Spark writes
each of these files whole and renames it into place, so a killed process leaves none torn; a
machine that lost power before its disk had the bytes, a full or failing disk, or a hand can.
Spark then refuses to start the query, and every row after it waits.

Mended by setting the one torn file aside, when it is safe:

- the newest ``commits/N`` unreadable (``offsets/N`` intact), an ingestion's or a job's: batch
  N runs again from the same positions (a job's from the same state too, the state batch N - 1
  left), as after a crash before its commit, and the tables' idempotency key skips what it had
  written;
- the newest ``offsets/N`` unreadable, no ``commits/N``, and the query's tables hold no write
  of its batch N (an ingestion's bronze and quarantine: Delta's key; a job's gold: its writer's
  marker or Delta's key): it never reached them, so it is planned again (possibly with more
  input; a job's from the state batch N - 1 left) and written once.

Everything else is refused, saying why and what to do: an ``offsets/N`` whose batch was written
(planned again it could take more input than the batch written, and the key would skip it
all) or committed, a torn file older than the newest, a lost ``metadata`` (the identity the
writes are keyed by). A job's savepoint or a rebuild mends those (`savepoints.mend_corrupt`);
an ingestion's needs the file back.
The file set aside is kept under ``checkpoints/.replaced/<query>-repair-<stamp>/`` (retention
prunes it as it prunes a restore's).

Every run does the same at its start, holding the lock (`mend_at_start`, with a restore or a
swap cut short): a continuous run restarted after the fault runs on, every query with it,
instead of failing on the torn file and waiting for a recovery run.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timezone

from streaming_jobs.core import locations
from streaming_jobs.core.checkpoints import (
    batch_ids,
    batch_metadata,
    bronze_app_id,
    checkpoint_lock,
    log_file_error,
    query_id,
    stream_of,
)
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.core.delta_log import batch_written, sink_app_id
from streaming_jobs.core.locations import Location


LOG = logging.getLogger(__name__)


class RepairRefused(RuntimeError):
    """The checkpoint cannot be mended safely by tidemark; the message says why and what to do."""


@dataclass(frozen=True)
class Repair:
    query: str
    batch_id: int
    set_aside: str  # the checkpoint file set aside: "offsets/N" or "commits/N"
    kept_in: str  # where it is kept
    next_run: str  # what the next run does

    def said(self) -> str:
        return (
            f"{self.query}: {self.set_aside} was unreadable and is set aside (kept in "
            f"{self.kept_in}); {self.next_run}"
        )


def newest_written(cfg: TidemarkConfig, stream: str, app_id: str) -> int | None:
    """The newest batch ``app_id`` wrote to the stream's bronze or quarantine table (Delta's
    ``txn`` for it, read from the table's whole state, checkpoints included), or None."""
    found = []
    for layer in ("bronze", "quarantine"):
        table = cfg.paths.table(layer, stream)
        if locations.is_delta_table(table):
            version = locations.delta_table(table).transaction_version(app_id)
            if version is not None:
                found.append(int(version))
    return max(found, default=None)


def ingestion_stream(query: str) -> str | None:
    """The stream whose ingestion ``query`` is (``bronze_<stream>``), None for a job."""
    from streaming_jobs.storage.registry import registry, streams

    stream = stream_of(query)
    return stream if query not in registry() and stream in streams() else None


def plan(cfg: TidemarkConfig, query: str) -> tuple[str, int, str] | None:
    """What mends the checkpoint of ``query`` (an ingestion, ``bronze_<stream>``, or a job):
    (the file to set aside, its batch, what the next run does); None when nothing in its logs
    is unreadable. Raises `RepairRefused`."""
    stream = ingestion_stream(query)
    checkpoint = Location.of(cfg.paths.checkpoint(query))
    if not locations.exists(checkpoint):
        return None
    identity = query_id(checkpoint)
    if identity is None:
        raise RepairRefused(
            f"{query}: its checkpoint's metadata (the query's id, which its writes are "
            "keyed by) is lost, and no command can make it again: put the file back from a "
            "backup (on a store with versioning, the object's previous version); "
            "docs/operating.md, Recovery playbook"
        )
    offsets, commits = batch_ids(checkpoint / "offsets"), batch_ids(checkpoint / "commits")
    torn = [
        (folder, batch, error)
        for folder, ids in (("offsets", offsets), ("commits", commits))
        for batch in ids
        if (error := log_file_error(checkpoint / folder / str(batch)))
    ]
    if not torn:
        return None
    newest = max(offsets + commits)
    if len(torn) > 1 or torn[0][1] != newest:
        listed = "; ".join(error for _, _, error in torn)
        raise RepairRefused(
            f"{query}: {listed}. Only the newest batch's file can be set aside safely; put "
            "these back from a backup (on a store with versioning, the objects' previous "
            "versions); docs/operating.md, Recovery playbook"
        )
    folder, batch, _ = torn[0]
    if folder == "commits":
        if batch not in offsets:
            raise RepairRefused(
                f"{query}: commits/{batch} is unreadable and offsets/{batch} is missing: the "
                "batch's positions are lost; put the files back from a backup"
            )
        if stream is None:
            return (
                f"commits/{batch}",
                batch,
                f"its next run runs batch {batch} again from the same positions and state, as "
                "after a crash before its commit, and gold's key skips what it had written",
            )
        return (
            f"commits/{batch}",
            batch,
            f"its next run runs batch {batch} again from the same positions, and bronze's "
            "key skips what it had written",
        )
    if stream is None:
        return _job_offsets(cfg, query, identity, batch, batch in commits)
    if batch in commits:
        raise RepairRefused(
            f"{query}: offsets/{batch} is unreadable, and batch {batch} was committed: its "
            "positions are lost and the next batch cannot start after them; put the file back "
            "from a backup (on a store with versioning, the object's previous version)"
        )
    written = newest_written(cfg, stream, bronze_app_id(identity))
    if written is not None and written >= batch:
        raise RepairRefused(
            f"{query}: offsets/{batch} is unreadable and batch {batch} was already written to "
            f"bronze or quarantine. Planned again it could read more than was written, and the "
            "idempotency key would skip it all: rows would be lost. Put the file back from a "
            "backup (on a store with versioning, the object's previous version)"
        )
    return (
        f"offsets/{batch}",
        batch,
        f"batch {batch} never reached bronze or quarantine (their newest write of this query "
        f"is batch {'none' if written is None else written}); its next run plans it again "
        "and writes it once",
    )


def _job_offsets(
    cfg: TidemarkConfig, job: str, identity: str, batch: int, committed: bool
) -> tuple[str, int, str]:
    """`plan` for a job's torn newest ``offsets/N``: set aside when batch N wrote nothing to
    gold (its writer's marker or Delta's key, `delta_log.sink_app_id`, is not there for it),
    so that it is planned again, from the state batch N - 1 left, and written once."""
    from streaming_jobs.storage.registry import get_job

    mended_otherwise = (
        f"its savepoint ('tidemark restore {job}') or a rebuild ('tidemark rebuild {job} "
        "--from-scratch') mends it; tidemark health says which"
    )
    if committed:
        raise RepairRefused(
            f"{job}: offsets/{batch} is unreadable, and batch {batch} was committed: its "
            f"positions are lost and the next batch cannot start after them; {mended_otherwise}"
        )
    checkpoint = Location.of(cfg.paths.checkpoint(job))
    gold = cfg.paths.table("gold", job)
    # batch N was triggered after batch N - 1: its writes are newer than that trigger
    since = (batch_metadata(checkpoint, batch - 1) or {}).get("batchTimestampMs")
    app_id = sink_app_id(get_job(job), identity)
    if locations.is_delta_table(gold) and batch_written(gold, app_id, batch, since):
        raise RepairRefused(
            f"{job}: offsets/{batch} is unreadable and batch {batch} was already written to "
            "gold. Planned again it could read more than was written, and gold's key would "
            f"skip it all: rows would be lost. {mended_otherwise[0].upper()}"
            f"{mended_otherwise[1:]}"
        )
    state = f", from the state batch {batch - 1} left," if batch else ""
    return (
        f"offsets/{batch}",
        batch,
        f"batch {batch} never reached gold; its next run plans it again{state} and writes it once",
    )


def repair(cfg: TidemarkConfig, query: str, holder: str = "tidemark repair") -> Repair | None:
    """Set aside the torn file `plan` names in ``query``'s checkpoint, holding the checkpoint's
    lock (`CheckpointBusy` while a run owns it); None when nothing is torn."""
    checkpoint = Location.of(cfg.paths.checkpoint(query))
    if not locations.exists(checkpoint):
        return None  # never ran (and no lock file left behind for it)
    with checkpoint_lock(checkpoint, holder):
        return _set_aside(cfg, query)


def mend_at_start(cfg: TidemarkConfig, query: str) -> Repair | None:
    """At a run's start, its caller holding the checkpoint's lock: the repair `repair` makes,
    when the newest ``offsets/N`` or ``commits/N`` is torn and `plan` finds it safe. Without it
    the query would fail at its start, and a continuous run hosting it would end with every
    other query it hosts until a recovery run mended it. None when the newest files read (two
    listings and two reads: every run pays them) or when the repair is refused: the query then
    fails as Spark finds it, and `checkpoint_health_sensor` alerts and starts what mends it."""
    checkpoint = Location.of(cfg.paths.checkpoint(query))
    newest = [
        checkpoint / folder / str(ids[-1])
        for folder in ("offsets", "commits")
        if (ids := batch_ids(checkpoint / folder))
    ]
    if not any(log_file_error(file) for file in newest):
        return None
    try:
        done = _set_aside(cfg, query)
    except RepairRefused as exc:
        LOG.error("%s: left as it is at the run's start: %s", query, exc)
        return None
    if done is not None:
        LOG.warning("repaired at the run's start: %s", done.said())
    return done


def _set_aside(cfg: TidemarkConfig, query: str) -> Repair | None:
    """`repair`, its caller holding the checkpoint's lock."""
    checkpoint = Location.of(cfg.paths.checkpoint(query))
    planned = plan(cfg, query)
    if planned is None:
        return None
    file, batch, next_run = planned
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    kept = Location.of(cfg.paths.checkpoints) / ".replaced" / f"{query}-repair-{stamp}"
    folder, name = file.split("/")
    # the file's checksum beside it on a local disk (Hadoop's .N.crc) goes with it, first: a
    # new file of that name would be checked against it. A repair cut short leaves the torn
    # file in place (on a store, perhaps also its copy), and the next one moves it.
    for each in (f".{name}.crc", name):
        source = checkpoint / folder / each
        if locations.is_file(source):
            locations.move(source, kept / folder / each)
    return Repair(query, batch, file, str(kept), next_run)
