"""Retention: what an always-on tidemark cleans up, so its cost follows new data, not history.

`maintain` (the ``maintenance_job`` on ``TIDEMARK_MAINTENANCE_CRON``, or ``tidemark maintain``)
does, in this order, each step on its own (one failing step is reported, the others still run):

1. **Landing files** that bronze has fully ingested (every line in bronze or quarantine, from a
   committed batch) are moved to ``archive/landing/<stream>/`` (``TIDEMARK_LANDING_RETENTION=
   archive``, the default), deleted (``delete``) or kept (``keep``). Archived files older than
   ``TIDEMARK_OPS_RETENTION_DAYS`` are deleted. A file that does not balance is never touched:
   the landing accounting names it.
2. **Lake tables** (bronze, quarantine, gold): Delta ``OPTIMIZE`` (bin-packing small files;
   with row tracking, each row keeps its ``row_commit_version``, which reconciliation's
   lineage reads), then ``VACUUM ... LITE``. dbt's tables are vacuumed only (dbt rewrites them
   whole), with delta-rs.
3. **Ops tables** (delta-rs): rows older than ``TIDEMARK_OPS_RETENTION_DAYS`` pruned from
   ``stream_failures``, ``expectations`` and ``alerts`` (only incidents resolved and fully
   delivered), then compaction, ``VACUUM``, a log checkpoint and the log's expired entries.
   ``stream_progress``'s batches past that age are folded, per job, into one rollup row,
   and the rows they dropped as late are recorded in ``stream_late_rows``, which
   reconciliation's lateness replay reads instead (`streaming_jobs.operations.lineage`);
   the raw ``progress_json`` of rows past the age that cannot be folded yet (a savepoint
   may still restore to them) is cleared.
4. **Old checkpoints** set aside by restores (``checkpoints/.replaced/``) older than
   ``TIDEMARK_OPS_RETENTION_DAYS``.

Safety while everything else runs:

- ``OPTIMIZE`` and appends never conflict, and streaming readers skip its commits (they change
  no data). A gold table written by ``MERGE`` (update mode) is compacted only while its job is
  not running (its checkpoint lock is free): a compaction committed under a running MERGE
  would fail that batch.
- ``VACUUM`` keeps every file some reader may still need: at least
  ``TIDEMARK_VACUUM_RETAIN_HOURS`` (default 168, Delta's own), and longer while a savepoint is
  older (a restore rewinds gold with ``RESTORE`` and replays bronze from the savepoint's
  versions) or a job lags (a checkpoint that has not read a bronze version yet, or whose first
  batch is still in flight, needs its files). Retention is rounded up to whole hours: Delta
  rounds ``RETAIN`` to the nearest hour (``RETAIN 0.4 HOURS`` deletes everything removed,
  measured), which the soak caught deleting files a lagging join still had to read.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone

from streaming_jobs.core import locations, requests
from streaming_jobs.core.locations import Item, Location, Where
from streaming_jobs.storage import ops_tables
from streaming_jobs.core.checkpoints import CheckpointBusy, checkpoint_lock, last_committed_batch
from streaming_jobs.storage.lake import spark_path
from streaming_jobs.storage.spark import session_settings
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.core.delta_log import commit_actions, commit_versions, latest_version

LOG = logging.getLogger("tidemark.retention")
LAYERS = ("bronze", "quarantine", "gold")
# ops rows pruned beyond the retention age, by the column that dates them, and what else must
# hold (an alert is pruned only once resolved and both notifications were delivered)
PRUNED = {
    "stream_failures": ("failed_at", None),
    "expectations": ("recorded_at", None),
    "alerts": (
        "resolved_at",
        "firing_delivered_at is not null and resolved_delivered_at is not null",
    ),
}

# why the other ops tables keep their rows
KEPT = {
    "stream_progress": "batches past the age folded into a rollup row per job (see the fold "
    "step); raw progress past the age cleared",
    "stream_late_rows": "rows kept: the late rows of folded batches, which reconciliation's "
    "lateness replay reads",
    "recon_runs": "runs past the age pruned, except each job's latest (what `tidemark recon` "
    "reports)",
}


@dataclass
class Step:
    """One maintenance step on one target."""

    target: str  # e.g. "gold/failed_txn_velocity", "landing/transactions", "ops/alerts"
    action: str  # optimize, vacuum, prune, archive, delete, remove, skipped, failed
    detail: str = ""
    files_before: int | None = None
    files_after: int | None = None
    rows_removed: int = 0
    bytes_freed: int = 0
    seconds: float = 0.0  # the step's wall time (a shared machine shows here where time goes)


@dataclass
class Maintenance:
    steps: list[Step] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failed(self) -> list[Step]:
        return [s for s in self.steps if s.action == "failed"]

    def total(self, attribute: str) -> int:
        return sum(getattr(s, attribute) or 0 for s in self.steps)


def _disk(path: Where) -> tuple[int, int]:
    """(data files, bytes) under a table's folder, its log left out."""
    files = [
        e
        for e in locations.entries(path)
        if e.relative.endswith(".parquet") and "_delta_log" not in e.relative.split("/")
    ]
    return len(files), sum(e.size for e in files)


def delta_tables(folder: Where) -> list[Where]:
    """The Delta tables directly under ``folder``."""
    return [
        e.place
        for e in locations.items(folder)
        if e.kind == "folder" and locations.is_dir(e.place / "_delta_log")
    ]


# -- how long VACUUM must keep files ---------------------------------------------------------

# commits that change no data: a reader's offset may stay before them without needing them
NO_DATA = ("OPTIMIZE", "VACUUM START", "VACUUM END")


def _commit(table: Where, version: int) -> dict | None:
    """The commitInfo of a version (None once the log entry has expired)."""
    try:
        for action in commit_actions(table, version):
            if action.get("commitInfo"):
                return action["commitInfo"]
        found = locations.stat(_log_of(table) / f"{version:020d}.json")
        return {"timestamp": found.modified * 1000} if found else None
    except (OSError, ValueError):
        return None


def _log_of(table: Where) -> Location:
    return Location.of(table) / "_delta_log"


def _oldest_unread(cfg: TidemarkConfig, table: Where) -> float | None:
    """When the oldest version of ``table`` that some checkpoint has not read yet was
    committed (None if every checkpoint reading it is caught up).

    A checkpoint has read what its last committed batch's offsets say; a batch planned but not
    committed (in flight, or cut short by a crash and replayed on restart) reads after that.
    A checkpoint with a planned batch and no commit yet reads its whole starting snapshot:
    every version counts as unread.
    """
    from streaming_jobs.core.checkpoints import last_planned_batch
    from streaming_jobs.runtime.progress import delta_done_version

    table_id, latest = _table_id(table), latest_version(table)
    oldest = None
    for entry in locations.items(cfg.paths.checkpoints):
        if entry.name.startswith(".") or entry.kind != "folder":
            continue
        checkpoint = entry.place
        committed, planned = last_committed_batch(checkpoint), last_planned_batch(checkpoint)
        batch = committed if committed is not None else planned
        if batch is None:
            continue  # never started: it will read the snapshot current when it does
        for offset in _delta_offsets(checkpoint, batch):
            if offset.get("reservoirId") != table_id:
                continue
            done = delta_done_version(offset) if committed is not None else -1
            if done is None:
                continue
            for version in range(done + 1, (latest if latest is not None else -1) + 1):
                info = _commit(table, version)
                if info is not None and info.get("operation") not in NO_DATA:
                    committed_at = info["timestamp"] / 1000
                    oldest = committed_at if oldest is None else min(oldest, committed_at)
                    break
    return oldest


def _delta_offsets(checkpoint: Where, batch: int) -> list[dict]:
    """The Delta source offsets of a batch (``offsets/N``: a version line, the batch's
    metadata, then one line per source)."""
    try:
        lines = locations.read_text(Location.of(checkpoint) / "offsets" / str(batch)).splitlines()
    except OSError:
        return []
    out = []
    for line in lines[2:]:
        try:
            offset = json.loads(line)
        except ValueError:
            continue
        if isinstance(offset, dict) and "reservoirId" in offset:
            out.append(offset)
    return out


def _table_id(table: Where) -> str | None:
    try:  # the first commit holds it (a table's id never changes)
        for action in commit_actions(table, 0):
            if action.get("metaData"):
                return action["metaData"].get("id")
    except (OSError, ValueError):
        pass
    try:  # the first commits expired (`expire_log`): ask the table
        return locations.delta_table(table).metadata().id
    except Exception:  # noqa: BLE001 - not a table any more
        return None


def _oldest_savepoint(cfg: TidemarkConfig) -> float | None:
    from streaming_jobs.operations.savepoints import savepoints

    taken = []
    for job in locations.items(cfg.paths.savepoints):
        if job.kind != "folder" or job.name.startswith("."):
            continue
        for point in savepoints(cfg, job.name):
            stamp = datetime.strptime(point.taken_at, "%Y%m%dT%H%M%S%fZ")
            taken.append(stamp.replace(tzinfo=timezone.utc).timestamp())
    return min(taken) if taken else None


MARGIN_HOURS = 5 / 60  # beyond what a savepoint or a lagging reader needs (clock skew)


def retain_hours(
    cfg: TidemarkConfig,
    table: Where,
    now: float | None = None,
    at_least: tuple[float, str] | None = None,
) -> tuple[float, str]:
    """How many hours of removed files ``VACUUM`` keeps for ``table`` (or of log entries, with
    ``at_least=(cfg.ops.log_retain_hours, ...)``), and why.

    A file removed (by OPTIMIZE) after the oldest version a reader has not read yet may have
    been added by that version: keeping everything removed since that version was committed
    keeps every file the reader will ask for. Likewise from the oldest savepoint.
    """
    now = time.time() if now is None else now
    hours, why = at_least or (cfg.ops.vacuum_retain_hours, "TIDEMARK_VACUUM_RETAIN_HOURS")
    for since, reason in (
        (_oldest_savepoint(cfg), "the oldest savepoint"),
        (_oldest_unread(cfg, table), "a checkpoint that has not read it all"),
    ):
        if since is not None and (now - since) / 3600 + MARGIN_HOURS > hours:
            hours, why = (now - since) / 3600 + MARGIN_HOURS, reason
    return hours, why


# -- how long the Delta log keeps its entries -----------------------------------------------

# a log file of one version: its commit, its checksum, its checkpoint (one file or parts)
VERSION_FILE = re.compile(
    r"^(\d{20})\.(json|crc|checkpoint\.parquet|checkpoint\.\d+\.\d+\.parquet)$"
)
CHECKPOINT_FILE = re.compile(r"^(\d{20})\.checkpoint\.parquet$")
COMPACTED_FILE = re.compile(r"^(\d{20})\.(\d{20})\.compacted\.json$")


def log_files(table: Where) -> int:
    """How many files the table's ``_delta_log`` holds (its folders left out)."""
    return sum(1 for e in locations.items(_log_of(table)) if e.kind == "file")


def expire_log(table: Where, keep_since: float) -> tuple[int, int | None]:
    """Delete the log entries of ``table`` that no snapshot committed at or after
    ``keep_since`` (a Unix time) needs; returns (files deleted, the first version kept).

    Delta's own rule, with tidemark's horizon instead of the table's fixed
    ``delta.logRetentionDuration`` (30 days): every file of a version before the newest
    checkpoint whose commit is at or before ``keep_since``. Every version from that checkpoint
    on stays readable (time travel, a stream resuming, RESTORE). Files go oldest first, so a
    process killed midway leaves the log a contiguous run of versions from a checkpoint on,
    which the next run finishes. No table property is set: a metadata commit would fail every
    stream writing the table at that moment (Delta's ``MetadataChangedException``).
    """
    folder = _log_of(table)
    files = {e.name: e for e in locations.items(folder) if e.kind == "file"}
    names = list(files)
    floor = None
    for name in sorted(names):
        match = CHECKPOINT_FILE.match(name)
        if not match:
            continue
        version = int(match.group(1))
        commit = files.get(f"{version:020d}.json")
        if commit is None:
            continue  # its commit already expired: an older floor, never a newer one
        if commit.modified <= keep_since and files[name].size > 0:
            floor = version if floor is None else max(floor, version)
    if floor is None:
        return 0, None
    doomed = []
    for name in names:
        # Hadoop's checksum of a log file (``.<name>.crc``, written by Spark on a local disk)
        # goes with it
        base = name[1:-4] if name.startswith(".") and name.endswith(".crc") else name
        single, compacted = VERSION_FILE.match(base), COMPACTED_FILE.match(base)
        if single and int(single.group(1)) < floor:
            doomed.append((int(single.group(1)), name))
        elif compacted and int(compacted.group(2)) < floor:
            doomed.append((int(compacted.group(2)), name))
    for _, name in sorted(doomed):
        locations.delete(folder / name)
    return len(doomed), floor


def log_retain_hours(
    cfg: TidemarkConfig, table: Where, layer: str, now: float | None = None
) -> tuple[float, str]:
    """How many hours of log entries ``table`` keeps, and why: ``TIDEMARK_LOG_RETAIN_HOURS``,
    longer while a savepoint or a lagging checkpoint needs older versions (`retain_hours`);
    never less than what the table's ``VACUUM`` keeps (``VACUUM LITE`` finds removed files in
    the commits that removed them: a commit expired before its files are old enough to delete
    leaves them on disk for good, which the 90-minute soak found); bronze also back to the age
    past which progress is folded (the fold reads the statistics of the bronze commits its
    batches read, `lineage`)."""
    hours, why = retain_hours(
        cfg, table, now, at_least=(cfg.ops.log_retain_hours, "TIDEMARK_LOG_RETAIN_HOURS")
    )
    vacuum, vacuum_why = retain_hours(cfg, table, now)
    vacuum = math.ceil(vacuum) + MARGIN_HOURS  # VACUUM keeps whole hours (`_lake_table`)
    if vacuum > hours:
        hours, why = vacuum, f"what VACUUM keeps, in whole hours ({vacuum_why})"
    if layer == "bronze":
        fold = cfg.ops.ops_retention_days * 24 + MARGIN_HOURS
        if fold > hours:
            hours, why = fold, "progress not folded yet (TIDEMARK_OPS_RETENTION_DAYS)"
    return hours, why


def _log(out: Maintenance, target: str, cfg: TidemarkConfig, table: Where, layer: str) -> None:
    hours, why = log_retain_hours(cfg, table, layer)
    before = log_files(table)
    deleted, floor = expire_log(table, time.time() - hours * 3600)
    if deleted:
        out.steps.append(
            Step(
                target,
                "expire log",
                f"{deleted} log files before version {floor} removed; kept {hours:.2f} h ({why})",
                before,
                log_files(table),
            )
        )


# -- the steps ---------------------------------------------------------------------------------


def _guarded(out: Maintenance, target: str, action, *args) -> None:
    """Run one step; a failure is a ``failed`` step with its reason, and the others go on."""
    started, before = time.monotonic(), len(out.steps)
    try:
        action(out, target, *args)
    except Exception as exc:  # noqa: BLE001 - reported, the next step still runs
        LOG.warning("maintenance of %s failed: %s", target, exc)
        out.steps.append(Step(target, "failed", f"{type(exc).__name__}: {str(exc)[:500]}"))
    added = out.steps[before:]
    for step in added:  # a target's steps share its time (e.g. optimize then vacuum)
        step.seconds = (time.monotonic() - started) / len(added)


def _ingested_files(cfg: TidemarkConfig, stream: str) -> dict[str, tuple[int, tuple]]:
    """Per source file: the rows bronze and quarantine hold from it, and its (size, change
    time) when it was read (None, None before tidemark recorded them); read with delta-rs."""
    from streaming_jobs.operations.landing import read_per_file

    rows: dict[str, tuple[int, tuple]] = {}
    for layer in ("bronze", "quarantine"):
        for name, (n, _, size, modified) in read_per_file(cfg.paths.table(layer, stream)).items():
            had, read_as = rows.get(name, (0, (None, None)))
            rows[name] = (had + n, (size, modified) if size is not None else read_as)
    return rows


def _committed_files(checkpoint: Where) -> set[str]:
    """The files a file-source checkpoint read in its committed batches (`landing_key`'s
    names)."""
    batch = last_committed_batch(checkpoint)
    seen: set[str] = set()
    log = Location.of(checkpoint) / "sources" / "0"
    if batch is None:
        return seen
    for entry in locations.items(log):
        number = entry.name.split(".")[0]
        if entry.kind != "file" or not number.isdigit() or int(number) > batch:
            continue
        for line in locations.read_text(entry.place).splitlines()[1:]:
            try:
                info = json.loads(line)
            except ValueError:
                continue
            if int(info.get("batchId", batch + 1)) <= batch:
                seen.add(locations.from_spark_uri(info["path"]))
    return seen


def _landing(out: Maintenance, target: str, cfg: TidemarkConfig, stream: str) -> None:
    from streaming_jobs.runtime.ingestion import landing_files, landing_key
    from streaming_jobs.core.checkpoints import query_name
    from streaming_jobs.core.landed_bytes import measured
    from streaming_jobs.operations.landing import replaced

    policy = cfg.ops.landing_retention
    if policy == "keep":
        return
    folder = cfg.paths.landing_dir(stream)
    files = landing_files(folder)
    if not files:
        return
    ingested = _ingested_files(cfg, stream)
    committed = _committed_files(cfg.paths.checkpoint(query_name(stream)))
    archive = archive_dir(cfg, stream)
    moved = freed = 0
    for path in files:
        key = landing_key(path.place)
        if key not in committed:
            continue  # not read yet
        rows, read_as = ingested.get(key, (0, (None, None)))
        if replaced(path, *read_as):
            continue  # replaced after it was read: the accounting names it
        try:
            if rows != measured(path).lines:
                continue  # it does not balance (the accounting names it)
        except (ValueError, FileNotFoundError):
            continue  # bytes Spark cannot read under that name, or gone (named as well)
        if policy == "delete":
            locations.delete(path.place)
            freed += path.size
        else:
            locations.move(path.place, archive / path.name)
        moved += 1
    out.steps.append(
        Step(
            target,
            policy,
            f"{moved} of {len(files)} files fully ingested",
            len(files),
            len(files) - moved,
            bytes_freed=freed,
        )
    )


def archive_dir(cfg: TidemarkConfig, stream: str) -> Where:
    return cfg.data_root / "archive" / "landing" / stream


def archived_files(cfg: TidemarkConfig, stream: str) -> list[Item]:
    """The landing files of ``stream`` that retention archived (fully ingested)."""
    return [e for e in locations.items(archive_dir(cfg, stream)) if e.kind == "file"]


def _archive(out: Maintenance, target: str, folder: Where, cutoff: float) -> None:
    old = [e for e in locations.items(folder) if e.kind == "file" and e.modified < cutoff]
    freed = sum(e.size for e in old)
    for e in old:
        locations.delete(e.place)
    if old:
        out.steps.append(
            Step(
                target,
                "delete",
                f"{len(old)} archived files past retention",
                rows_removed=0,
                bytes_freed=freed,
            )
        )


def _update_mode_gold(cfg: TidemarkConfig) -> set[str]:
    from streaming_jobs.storage.registry import catalogue

    return {name for name, spec in catalogue().jobs.items() if spec.output_mode == "update"}


def _active_files(table: Where) -> int:
    return len(locations.delta_table(table).file_uris())


def _lake_table(
    out: Maintenance,
    target: str,
    spark,
    cfg: TidemarkConfig,
    table: Where,
    compact: bool,
    merged_by: str | None,
) -> None:
    from delta.tables import DeltaTable

    files_before, bytes_before = _disk(table)
    if compact and _active_files(table) > 1:  # one file or none: nothing to bin-pack
        handle = DeltaTable.forPath(spark, spark_path(table))
        try:
            with (
                checkpoint_lock(cfg.paths.checkpoint(merged_by), "maintenance (OPTIMIZE)")
                if merged_by
                else nullcontext()
            ):
                tries = retry_conflicts(lambda: handle.optimize().executeCompaction())
            out.steps.append(
                Step(
                    target,
                    "optimize",
                    "small files bin-packed"
                    + (
                        f" (after {tries - 1} conflicts with a concurrent writer)"
                        if tries > 1
                        else ""
                    ),
                    files_before,
                )
            )
        except CheckpointBusy:
            out.steps.append(
                Step(
                    target,
                    "skipped",
                    f"not compacted: job {merged_by} is running and writes it with MERGE",
                )
            )
        except ConcurrentCompaction as exc:
            out.steps.append(Step(target, "skipped", f"not compacted: {exc}"))
    hours, why = retain_hours(cfg, table)
    hours = math.ceil(hours)  # Delta rounds VACUUM's RETAIN to whole hours: never down
    _vacuum(spark, table, hours)
    files_after, bytes_after = _disk(table)
    out.steps.append(
        Step(
            target,
            "vacuum",
            f"kept {hours} h of removed files ({why})",
            files_before,
            files_after,
            bytes_freed=max(bytes_before - bytes_after, 0),
        )
    )


def _owned_lake_table(
    out: Maintenance, target: str, spark, cfg: TidemarkConfig, table: Where, layer: str
) -> None:
    """A lake table on an object store, maintained under its writer's lease (the query that
    writes it: a stream's ingestion for bronze and quarantine, the job for gold), so that
    OPTIMIZE's and VACUUM's commits never race the writer's from another process. While the
    writer runs, it is asked to do it (`request_maintenance`): a continuous run answers between
    batches, in its own driver; a writer that takes no request is left alone, said so."""
    owner = table_owner(table, layer)
    try:
        with checkpoint_lock(cfg.paths.checkpoint(owner), f"maintenance of {target}"):
            _lake_table(out, target, spark, cfg, table, True, None)
        return
    except CheckpointBusy:
        pass
    request_id = request_maintenance(cfg, owner, target, table, layer)
    answer = wait_for_maintenance(cfg, owner, request_id)
    if answer is None:
        out.steps.append(
            Step(
                target,
                "skipped",
                f"not maintained: {owner} is running and took no maintenance request within "
                f"{MAINTENANCE_PICKUP_SECONDS:g} s (only a continuous run takes them); on an "
                "object store a table has one writer at a time, and the next maintenance run "
                "between its runs does it",
            )
        )
        return
    if answer.get("error"):
        out.steps.append(
            Step(target, "failed", f"maintained by {owner}'s run, which said: {answer['error']}")
        )
        return
    for step in answer["steps"]:
        out.steps.append(Step(**{**step, "detail": f"{step['detail']} (by {owner}'s run)"}))


def table_owner(table: Where, layer: str) -> str:
    """The query whose checkpoint's lease covers a lake table: the job for gold, the stream's
    ingestion for bronze and quarantine."""
    from streaming_jobs.core.checkpoints import query_name

    name = Location.of(table).name
    return name if layer == "gold" else query_name(name)


# -- maintenance of a table whose writer runs: requests its run answers (on a store) ---------

MAINTENANCE_REQUESTS = ".maintenance"
# how long a running writer has to take a request (a continuous run looks every second,
# between its other work) and to finish it
MAINTENANCE_PICKUP_SECONDS = 90.0
MAINTENANCE_ANSWER_SECONDS = 900.0


def maintenance_requests(cfg: TidemarkConfig) -> Location:
    """The folder of maintenance requests: a folder per owner that has some."""
    return Location.of(cfg.paths.checkpoints) / MAINTENANCE_REQUESTS


def _maintenance_requests(cfg: TidemarkConfig, owner: str) -> Location:
    return maintenance_requests(cfg) / owner


def request_maintenance(
    cfg: TidemarkConfig, owner: str, target: str, table: Where, layer: str
) -> str:
    """Ask the run holding ``owner``'s checkpoint to maintain ``table`` (of ``layer``); the
    request's id."""
    payload = {"target": target, "layer": layer, "name": Location.of(table).name}
    return requests.ask(_maintenance_requests(cfg, owner), payload)


def pending_maintenance(cfg: TidemarkConfig, owner: str) -> list[tuple[str, dict]]:
    """The maintenance requests for ``owner`` no run has taken: (id, request)."""
    folder = _maintenance_requests(cfg, owner)
    found = [(i, requests.read(folder, i)) for i in requests.pending(folder)]
    return [(i, request) for i, request in found if request is not None]  # None: withdrawn


def answer_maintenance(
    spark, cfg: TidemarkConfig, owner: str, request_id: str, request: dict
) -> Maintenance:
    """By the run holding ``owner``'s lease: take the request (gone from the pending ones),
    maintain the table in this driver, and write the steps (or the error) as the answer."""
    folder = _maintenance_requests(cfg, owner)
    requests.withdraw(folder, request_id)  # taken: the requester waits for the answer now
    done = Maintenance()
    try:
        table = cfg.paths.table(request["layer"], request["name"])
        _lake_table(done, request["target"], spark, cfg, table, True, None)
        reply = {"steps": [asdict(s) for s in done.steps]}
    except Exception as exc:  # noqa: BLE001 - answered; the run goes on
        reply = {"error": f"{type(exc).__name__}: {str(exc)[:1000]}"}
        done.steps.append(Step(request["target"], "failed", reply["error"]))
    requests.answer(folder, request_id, reply)
    return done


def wait_for_maintenance(cfg: TidemarkConfig, owner: str, request_id: str) -> dict | None:
    """The answer to a request; None (the request withdrawn) when no run took it within
    `MAINTENANCE_PICKUP_SECONDS`, or none answered within `MAINTENANCE_ANSWER_SECONDS`."""
    folder = _maintenance_requests(cfg, owner)
    started = time.monotonic()
    while not requests.is_answered(folder, request_id):
        waited = time.monotonic() - started
        untaken = requests.is_pending(folder, request_id)
        if (untaken and waited > MAINTENANCE_PICKUP_SECONDS) or waited > MAINTENANCE_ANSWER_SECONDS:
            requests.withdraw(folder, request_id)
            return None
        time.sleep(0.5)
    return requests.collect(folder, request_id)


class ConcurrentCompaction(Exception):
    """OPTIMIZE kept losing to a concurrent commit (e.g. the job's own auto compaction)."""


CONFLICT_ATTEMPTS = 3


def retry_conflicts(action, attempts: int = CONFLICT_ATTEMPTS, pause: float = 2.0) -> int:
    """Run ``action`` (an OPTIMIZE); on a Delta write conflict (``DELTA_CONCURRENT_...``: a
    job's auto compaction, seen in the soak, committed first) try again on the new snapshot.
    Returns the attempts it took; raises `ConcurrentCompaction` after ``attempts`` conflicts
    (the next maintenance run compacts what is left). Any other error passes unchanged."""
    for attempt in range(1, attempts + 1):
        try:
            action()
            return attempt
        except Exception as exc:  # noqa: BLE001 - only write conflicts are retried
            if "DELTA_CONCURRENT" not in str(exc):
                raise
            if attempt == attempts:
                raise ConcurrentCompaction(
                    f"{attempts} attempts each lost to a concurrent commit "
                    f"({str(exc).split(']')[0].lstrip('[')}); the next maintenance run "
                    "compacts it"
                ) from exc
            time.sleep(pause * attempt)
    return attempts


def _dbt_table(out: Maintenance, target: str, spark, cfg: TidemarkConfig, table: Where) -> None:
    """dbt rewrites its tables whole and no stream reads them: ``VACUUM`` with delta-rs
    (milliseconds, whole hours only), or Spark's when delta-rs cannot write the table."""
    files_before, bytes_before = _disk(table)
    hours = math.ceil(cfg.ops.vacuum_retain_hours)
    anew = Step(
        target,
        "skipped",
        "a reconciliation is writing the table anew; the next run vacuums it",
        files_before,
        files_before,
    )
    try:
        locations.delta_table(table).vacuum(
            retention_hours=hours, enforce_retention_duration=False, dry_run=False
        )
    except Exception:  # noqa: BLE001 - a table feature delta-rs lacks: Spark's own VACUUM
        if latest_version(table) is None:
            # a reconciliation is writing the table anew right now: its log is gone, or it
            # has no commit yet (both seen in soaks); the next maintenance vacuums it
            out.steps.append(anew)
            return
        try:
            _vacuum(spark, table, hours)
        except Exception as exc:  # noqa: BLE001 - only a table gone meanwhile is skipped
            if "DELTA_MISSING_DELTA_TABLE" not in str(exc):
                raise
            out.steps.append(anew)
            return
    files_after, bytes_after = _disk(table)
    out.steps.append(
        Step(
            target,
            "vacuum",
            f"kept {hours} h of removed files",
            files_before,
            files_after,
            bytes_freed=max(bytes_before - bytes_after, 0),
        )
    )
    _log(out, target, cfg, table, "dbt")


def _vacuum(spark, table: Where, hours: int) -> None:
    """``VACUUM ... LITE`` keeping ``hours``: the files to delete come from the log's removes,
    not from listing the table's folder (a full listing is a Spark job of its own: a minute
    here for a table of ten files); ``FULL`` when the log no longer reaches back that far.
    Delta's guard against less than its own retention is lifted for this call only (tidemark
    computed what readers need, see `retain_hours`)."""
    # Delta 4.4 ignores a RETAIN other than 0 hours (keeping the table's 7-day default) unless
    # retentionWindowIgnore is off: found by the soak, whose VACUUMs deleted nothing
    lifted = {
        "spark.databricks.delta.retentionDurationCheck.enabled": "false",
        "spark.databricks.delta.vacuum.retentionWindowIgnore.enabled": "false",
    }
    # LITE reads the commits up to the newest one older than the retention; when the log's
    # oldest commit left is younger than that (expired by an older tidemark), Delta finds no
    # such commit and silently deletes nothing: list the folder instead (FULL)
    kind = "" if _log_starts_after(table, time.time() - hours * 3600) else "LITE"
    with session_settings(spark, lifted):
        try:
            spark.sql(f"VACUUM delta.`{spark_path(table)}` {kind} RETAIN {hours} HOURS").collect()
        except Exception as exc:  # noqa: BLE001 - only the log-too-short case is retried
            if "LITE" not in str(exc) and "FULL" not in str(exc):
                raise
            spark.sql(f"VACUUM delta.`{spark_path(table)}` RETAIN {hours} HOURS").collect()


def _log_starts_after(table: Where, since: float) -> bool:
    """Whether ``table``'s log no longer holds its first commit and its oldest commit left was
    made after ``since`` (a Unix time)."""
    versions = commit_versions(table)
    if not versions or versions[0] == 0:
        return False
    found = locations.stat(_log_of(table) / f"{versions[0]:020d}.json")
    return found is None or found.modified > since  # gone meanwhile: it starts later still


def _ops_table(
    out: Maintenance, target: str, cfg: TidemarkConfig, name: str, cutoff: datetime
) -> None:
    removed = 0
    with ops_tables.locked(cfg, name) as locked:
        if name in PRUNED:
            column, also = PRUNED[name]
            predicate = f"{column} < {ops_tables.literal(cutoff.strftime('%Y-%m-%d %H:%M:%S'))}"
            if also:
                predicate = f"{predicate} and {also}"
            stale = locked.read(where=predicate, columns=[column])
            if stale:
                locked.delete(predicate)
                removed = len(stale)
        elif name == "recon_runs":
            # past the age, except each job's latest run: its status is what `tidemark recon`
            # reports, however long ago it was reconciled
            rows = locked.read(columns=["run_key", "job", "finished_at"])
            latest: dict = {}
            for row in rows:
                if row["job"] not in latest or row["finished_at"] > latest[row["job"]][1]:
                    latest[row["job"]] = (row["run_key"], row["finished_at"])
            kept = (
                " or ".join(
                    f"(run_key = {ops_tables.literal(key)} and "
                    + (f"job = {ops_tables.literal(job)})" if job is not None else "job is null)")
                    for job, (key, _) in latest.items()
                )
                or "false"
            )
            predicate = (
                f"finished_at < {ops_tables.literal(cutoff.strftime('%Y-%m-%d %H:%M:%S'))}"
                f" and not ({kept})"
            )
            stale = locked.read(where=predicate, columns=["run_key"])
            if stale:
                locked.delete(predicate)
                removed = len(stale)
        elif name == "stream_progress":
            predicate = (
                f"ts < {ops_tables.literal(cutoff.strftime('%Y-%m-%d %H:%M:%S'))} "
                "and progress_json is not null"
            )
            if locked.read(where=predicate, columns=["ts"]):
                locked.update_sql({"progress_json": "NULL"}, predicate)
        path = ops_tables.path(cfg, name)
        files_before, bytes_before = _disk(path)
        table = locations.delta_table(path)
        table.optimize.compact()
        # readers of ops tables hold a snapshot for milliseconds: an hour is ample
        hours = max(1, int(min(cfg.ops.vacuum_retain_hours, 168)))
        table.vacuum(retention_hours=hours, enforce_retention_duration=False, dry_run=False)
        table.create_checkpoint()
        log_before = log_files(path)
        expire_log(path, time.time() - hours * 3600)
        log_after = log_files(path)
    files_after, bytes_after = _disk(path)
    out.steps.append(
        Step(
            target,
            "prune+compact" if name in PRUNED or removed else "compact",
            (
                f"rows older than {cutoff:%Y-%m-%d %H:%M} UTC pruned"
                if name in PRUNED
                else KEPT.get(name, "rows kept")
            )
            + f"; log files {log_before:,} -> {log_after:,}",
            files_before,
            files_after,
            removed,
            max(bytes_before - bytes_after, 0),
        )
    )


def _fold_progress(
    out: Maintenance, target: str, spark, cfg: TidemarkConfig, cutoff: datetime
) -> None:
    from streaming_jobs.operations import lineage

    replaced, rollups, late = lineage.fold(spark, cfg, cutoff)
    if rollups:
        out.steps.append(
            Step(
                target,
                "fold",
                f"{replaced:,} batch rows of {rollups} jobs "
                f"folded into their rollup rows; {late:,} late rows recorded in "
                "ops/stream_late_rows",
                rows_removed=replaced - rollups,
            )
        )


def _replaced(out: Maintenance, target: str, folder: Where, cutoff: float) -> None:
    old = [
        e.place for e in locations.items(folder) if e.kind == "folder" and _set_aside_at(e) < cutoff
    ]
    for place in old:
        locations.delete_tree(place)
    if old:
        out.steps.append(
            Step(
                target,
                "remove",
                f"{len(old)} checkpoints or files set aside by restores and repairs",
            )
        )


def _set_aside_at(entry: Item) -> float:
    """When a restore set a checkpoint aside, or a repair a file of one: the stamp in its name
    (``<job>-<stamp>``, `restores`; ``<query>-repair-<stamp>``, `repair`), else the folder's own time (a store keeps none for a folder: its newest
    file's)."""
    try:
        stamp = datetime.strptime(entry.name.rsplit("-", 1)[-1], "%Y%m%dT%H%M%S%fZ")
        return stamp.replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        pass
    if entry.modified:
        return entry.modified
    return max((e.modified for e in locations.entries(entry.place)), default=time.time())


def maintain(spark, cfg: TidemarkConfig, now: datetime | None = None) -> Maintenance:
    """Every retention step (see the module doc); each step's outcome, failures included."""
    from streaming_jobs.storage.registry import catalogue

    started = time.monotonic()
    now = now or datetime.now(timezone.utc)
    cutoff = now - timedelta(days=cfg.ops.ops_retention_days)
    out = Maintenance()
    streams = catalogue().streams
    for stream in streams:
        _guarded(out, f"landing/{stream}", _landing, cfg, stream)
        folder = archive_dir(cfg, stream)
        if locations.is_dir(folder):
            _guarded(out, f"archive/landing/{stream}", _archive, folder, cutoff.timestamp())
    merged = _update_mode_gold(cfg)
    for layer in LAYERS:
        for table in delta_tables(cfg.paths.table(layer, "")):
            merged_by = table.name if layer == "gold" and table.name in merged else None
            if cfg.on_store:
                # one writing process per table on a store (Delta's S3 log store is safe for
                # no more): its maintenance only while its writer's lease is free, and held
                _guarded(out, f"{layer}/{table.name}", _owned_lake_table, spark, cfg, table, layer)
                continue
            _guarded(out, f"{layer}/{table.name}", _lake_table, spark, cfg, table, True, merged_by)
    for schema in locations.items(cfg.paths.warehouse):
        if schema.kind != "folder" or not schema.name.endswith(".db"):
            continue
        for table in delta_tables(schema.place):
            _guarded(
                out, f"dbt/{schema.name[: -len('.db')]}.{table.name}", _dbt_table, spark, cfg, table
            )
    _guarded(out, "ops/stream_progress", _fold_progress, spark, cfg, cutoff)
    for layer in LAYERS:  # after the fold, which reads bronze's commits
        for table in delta_tables(cfg.paths.table(layer, "")):
            _guarded(out, f"{layer}/{table.name}", _log, cfg, table, layer)
    for name in ops_tables.SCHEMAS:
        if ops_tables.exists(cfg, name):
            _guarded(out, f"ops/{name}", _ops_table, cfg, name, cutoff)
    replaced = Location.of(cfg.paths.checkpoints) / ".replaced"
    if locations.is_dir(replaced):
        _guarded(out, "checkpoints/.replaced", _replaced, replaced, cutoff.timestamp())
    out.seconds = time.monotonic() - started
    return out


def table(report: Maintenance) -> list[str]:
    """The steps as markdown table lines (the CLI prints them, Dagster shows them)."""

    def n(value) -> str:
        return "" if value is None else f"{value:,}"

    lines = [
        "| target | action | files before | files after | rows removed | MB freed | "
        "seconds | detail |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in report.steps:
        lines.append(
            f"| {s.target} | {s.action} | {n(s.files_before)} | {n(s.files_after)} | "
            f"{n(s.rows_removed)} | {s.bytes_freed / 1e6:.1f} | {s.seconds:.1f} | "
            f"{s.detail} |"
        )
    return lines
