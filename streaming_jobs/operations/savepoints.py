"""Savepoints: a consistent copy of a job's checkpoint, with its gold table's version.

A savepoint is taken between batches, by whoever owns the checkpoint:

- a job nobody runs: `take` takes the checkpoint's lock and copies it;
- a job a continuous run hosts (it holds the lock for its whole life): `request` leaves a
  request under ``savepoints/<job>/.requests/``; the continuous run sees it within a second or
  two, stops that one query when no batch is in flight, copies the checkpoint (`take_locked`),
  restarts the query and answers the request. `wait_for_answer` waits for that answer. So
  every job gets savepoints, running or not.

A savepoint copies the checkpoint (offsets, commits, metadata, state) and records the gold
table's Delta version and the last committed batch. It refuses a checkpoint that
`structural_findings` says is broken. No JVM is needed: the copy is files, the version comes
from the Delta log.

`restore` puts one back, under the lock, in stages a crash cannot leave half done
(`streaming_jobs.storage.restores`: a plan written first, finished by the next run that takes the lock):
the gold table is restored to the recorded version (Delta ``RESTORE``), the savepoint's copy is
staged with a new query id and swapped in (the broken checkpoint is kept under
``checkpoints/.replaced/`` for inspection), and the progress rows of the batches after the
savepoint are removed from ``ops/stream_progress`` (the kept ones move to the new query id). The next run replays those batches from bronze. The sinks
key their idempotent writes by the checkpoint's query id, and Delta's RESTORE keeps the table's
old markers, so the new id is what makes the replayed batches be written instead of skipped.

Layout: ``savepoints/<job>/<taken_at>-b<batch>/{checkpoint/, savepoint.json}``; the newest
``keep`` are kept. A savepoint counts once its ``savepoint.json`` is there, and that is written
last, after every file of the copy: a copy cut short has none, is never listed, and is removed
by the next savepoint of the job. No rename, so the same on an object store, where the copy is
made by the server (`streaming_jobs.core.locations`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from streaming_jobs.core import locations, requests
from streaming_jobs.core.locations import Location
from streaming_jobs.storage import restores
from streaming_jobs.core.checkpoints import last_committed_batch
from streaming_jobs.core.versions import read_record
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.core.delta_log import latest_version
from streaming_jobs.operations.health import (
    CRITICAL,
    REPAIR,
    RESTORE,
    Finding,
    structural_findings,
)
from streaming_jobs.core.checkpoints import (
    CheckpointBusy,
    checkpoint_lock,
    is_running,
    takes_savepoint_requests,
)


class SavepointError(RuntimeError):
    """A savepoint cannot be taken or restored; the message says why and what to do."""


@dataclass(frozen=True)
class Savepoint:
    job: str
    path: Location
    batch_id: int
    gold_version: int | None
    taken_at: str
    job_version: str | None = None  # the job's version that ran the checkpoint (`versions`)

    @classmethod
    def read(cls, path: Path | Location) -> "Savepoint":
        path = Location.of(path)
        info = json.loads(locations.read_text(path / "savepoint.json"))
        return cls(
            info["job"],
            path,
            info["batch_id"],
            info["gold_version"],
            info["taken_at"],
            info.get("job_version"),
        )


def _folder(cfg: TidemarkConfig, job: str) -> Location:
    return Location.of(cfg.paths.savepoints / job)


def savepoints(cfg: TidemarkConfig, job: str) -> list[Savepoint]:
    """The job's complete savepoints, oldest first (a copy without ``savepoint.json`` was cut
    short; hidden names are partial copies of older tidemarks and requests)."""
    found = []
    for name in locations.names(_folder(cfg, job)):
        if name.startswith("."):
            continue
        try:
            found.append(Savepoint.read(_folder(cfg, job) / name))
        except (OSError, ValueError, KeyError):
            continue  # cut short or unreadable: never chosen for a restore
    return sorted(found, key=lambda s: (s.taken_at, s.batch_id))


NO_SAVEPOINT = "no savepoint to restore"


def mend_corrupt(
    cfg: TidemarkConfig, job: str, findings: list[Finding], *, ingestion: bool = False
) -> list[Finding]:
    """``findings``, and when they say the checkpoint is broken, one more saying what mends it,
    with the `Finding.remedy` `checkpoint_health_sensor` starts. First the least that mends it:
    a torn newest log file set aside when that is safe (`streaming_jobs.storage.repairs`: the
    batch runs again, as after a crash before its commit); then, for a job, its latest savepoint
    restored, or, with none, the job rebuilt from bronze (said, not started). ``ingestion``:
    ``job`` is a stream's ingestion query, which has no savepoints: when its file cannot be set
    aside it is said why not and what to do."""
    if not any(f.kind == "checkpoint_corrupt" for f in findings):
        return findings
    said, remedy = _repair_said(cfg, job, ingestion)
    if not ingestion and remedy is None:
        kept = savepoints(cfg, job)
        if kept:
            said, remedy = (
                f"{job}: its latest savepoint {kept[-1].path.name} (batch {kept[-1].batch_id}) "
                f"mends it: checkpoint_health_sensor starts recovery_job to restore it, or by "
                f"hand 'tidemark restore {job}'",
                RESTORE,
            )
        else:
            said = (
                f"{job}: {NO_SAVEPOINT} under {cfg.paths.savepoints / job}, so no recovery run "
                f"is started. {_rebuild_said(job)}"
            )
    return [*findings, Finding("checkpoint_corrupt", CRITICAL, said, remedy)]


def _repair_said(cfg: TidemarkConfig, query: str, ingestion: bool) -> tuple[str, str | None]:
    """What mends a broken checkpoint by setting its torn newest file aside, and whether a
    recovery run can (`REPAIR`); or, when it cannot, for an ingestion why not (None), and for
    a job nothing ("", None: its savepoint or a rebuild is said instead)."""
    from streaming_jobs.storage.repairs import RepairRefused, plan

    try:
        planned = plan(cfg, query)
    except RepairRefused as refused:
        return (
            f"{refused} (an ingestion's checkpoint has no savepoints)" if ingestion else ""
        ), None
    if planned is None:  # a finding beyond the logs' files (the state, a missing offsets file)
        if not ingestion:
            return "", None
        return (
            f"{query}: an ingestion's checkpoint has no savepoints, and `tidemark repair` "
            "mends only a torn newest offsets or commits file: put the broken file back from "
            "a backup (on a store with versioning, the object's previous version); "
            "docs/operating.md, Recovery playbook"
        ), None
    file, _, next_run = planned
    return (
        f"{query}: {file} is set aside by the next run's start, by recovery_job "
        "(checkpoint_health_sensor starts it while no run owns the checkpoint) or by hand "
        f"with 'tidemark repair {query}'; then {next_run}"
    ), REPAIR


def _rebuild_said(job: str) -> str:
    """What mends a job no savepoint can: its rebuild from bronze, said with its cost."""
    return (
        f"The job can be rebuilt from bronze: 'tidemark rebuild {job} --from-scratch --force' "
        "removes its checkpoint, gold table and ops rows, and its next run streams all of "
        "bronze again (gold is empty until it has caught up)"
    )


def restorable(findings: list[Finding]) -> bool:
    """A broken checkpoint that a savepoint mends (findings `mend_corrupt` completed)."""
    return any(f.remedy == RESTORE for f in findings)


def repairable(findings: list[Finding]) -> bool:
    """An ingestion's broken checkpoint that a repair mends (findings `mend_corrupt`
    completed)."""
    return any(f.remedy == REPAIR for f in findings)


def take_locked(cfg: TidemarkConfig, job: str, *, keep: int = 3) -> Savepoint:
    """Copy the job's checkpoint; the caller holds its lock (no batch can be in flight)."""
    checkpoint = cfg.paths.checkpoint(job)
    if restores.pending(cfg, job):
        raise SavepointError(
            f"job {job}: a restore of its checkpoint was cut short; it finishes "
            "at the job's next run (or `tidemark restore`), then take one"
        )
    batch = last_committed_batch(checkpoint)
    if batch is None:
        raise SavepointError(
            f"job {job}: checkpoint {checkpoint} has no committed batch "
            "yet; run the job once before taking a savepoint"
        )
    broken = structural_findings(checkpoint)
    if broken:
        raise SavepointError(
            f"job {job}: refusing to save a broken checkpoint ("
            f"{broken[0].message}); restore an earlier savepoint instead"
        )
    version = latest_version(cfg.paths.table("gold", job))
    taken_at = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    folder = _folder(cfg, job)
    target = folder / f"{taken_at}-b{batch}"
    # copies cut short by a crash (we hold the lock: no other copy is being made)
    complete = {s.path.name for s in savepoints(cfg, job)}
    for name in locations.names(folder):
        if name not in complete and name != REQUESTS:
            locations.delete_tree(folder / name)
    locations.copy_tree(Location.of(checkpoint), target / "checkpoint")
    locations.write_bytes(  # last: the savepoint is complete from here on
        target / "savepoint.json",
        json.dumps(
            {
                "job": job,
                "batch_id": batch,
                "gold_version": version,
                "taken_at": taken_at,
                "job_version": (read_record(checkpoint) or {}).get("version"),
            }
        ).encode(),
    )
    for old in savepoints(cfg, job)[:-keep] if keep > 0 else []:
        locations.delete_tree(old.path)
    return Savepoint.read(target)


def take(cfg: TidemarkConfig, job: str, *, keep: int = 3, holder: str = "a savepoint") -> Savepoint:
    """Take a savepoint of a job nobody runs (`CheckpointBusy` if a run owns it)."""
    with checkpoint_lock(cfg.paths.checkpoint(job), holder):
        return take_locked(cfg, job, keep=keep)


# -- savepoints of running jobs: requests answered by the continuous run ----------------------


REQUESTS = ".requests"


def _requests(cfg: TidemarkConfig, job: str) -> Location:
    return _folder(cfg, job) / REQUESTS


def request(cfg: TidemarkConfig, job: str, requester: str) -> str:
    """Ask the run that owns ``job``'s checkpoint for a savepoint; returns the request id."""
    return requests.ask(_requests(cfg, job), {"requester": requester})


def pending(cfg: TidemarkConfig, job: str) -> list[str]:
    """Ids of the savepoint requests for ``job`` that no one has answered yet."""
    return requests.pending(_requests(cfg, job))


def answer(
    cfg: TidemarkConfig,
    job: str,
    request_id: str,
    *,
    savepoint: Savepoint | None = None,
    error: str | None = None,
) -> None:
    """Record the outcome of a request (by the run that owns the checkpoint)."""
    requests.answer(
        _requests(cfg, job),
        request_id,
        {"savepoint": savepoint.path.name if savepoint else None, "error": error},
    )


def wait_for_answer(
    cfg: TidemarkConfig,
    job: str,
    request_id: str,
    *,
    keep: int = 3,
    holder: str = "a savepoint",
    timeout_seconds: float = 600.0,
) -> Savepoint:
    """The savepoint the owner took for ``request_id``. If the owner stops before answering (the
    continuous run ended), the request is withdrawn and the savepoint taken here; if it neither
    answers nor stops in time, `SavepointError`."""
    try:
        outcome = requests.wait(
            _requests(cfg, job),
            request_id,
            lambda: is_running(cfg.paths.checkpoint(job)),
            timeout_seconds,
        )
    except TimeoutError:
        raise SavepointError(
            f"job {job}: the run that owns its checkpoint did not answer the savepoint "
            f"request within {timeout_seconds:.0f}s (a batch that takes that long?); the "
            "request was withdrawn. Try again later."
        ) from None
    if outcome is None:  # the owner stopped: taken here
        return take(cfg, job, keep=keep, holder=holder)
    if outcome.get("error"):
        raise SavepointError(
            f"job {job}: the continuous run could not take the savepoint: {outcome['error']}"
        )
    return Savepoint.read(_folder(cfg, job) / outcome["savepoint"])


def take_all(
    cfg: TidemarkConfig, jobs, *, keep: int = 3, holder: str = "a savepoint"
) -> dict[str, Savepoint | str]:
    """A savepoint of every job, running or not: per job the `Savepoint`, or why there is none.

    Jobs a continuous run hosts are asked all at once (it answers them in one pass); the
    others are taken here.
    """
    out: dict[str, Savepoint | str] = {}
    asked = {}
    for job in jobs:
        if takes_savepoint_requests(cfg.paths.checkpoint(job)):
            asked[job] = request(cfg, job, holder)
            continue
        try:
            out[job] = take(cfg, job, keep=keep, holder=holder)
        except (CheckpointBusy, SavepointError) as exc:
            out[job] = str(exc)
    for job, request_id in asked.items():
        try:
            out[job] = wait_for_answer(cfg, job, request_id, keep=keep, holder=holder)
        except (CheckpointBusy, SavepointError) as exc:
            out[job] = str(exc)
    return out


# -- restore ----------------------------------------------------------------------------------


def restore(
    spark,
    cfg: TidemarkConfig,
    job: str,
    savepoint: Savepoint | None = None,
    *,
    holder: str = "a restore",
) -> Savepoint:
    """Put ``savepoint`` (default: the latest) back as the job's checkpoint; see the module doc."""
    available = savepoints(cfg, job)
    if savepoint is None:
        if not available:
            raise SavepointError(
                f"job {job}: {NO_SAVEPOINT} under {cfg.paths.savepoints / job}. "
                f"{_rebuild_said(job)}. Take savepoints regularly: 'tidemark savepoint {job}', "
                "or the savepoint schedule."
            )
        savepoint = available[-1]
    with checkpoint_lock(cfg.paths.checkpoint(job), holder):
        # an earlier restore cut short is finished first; then this one, in stages
        restores.finish_pending(lambda: spark, cfg, job)
        steps = restores.plan(cfg, job, savepoint.path, savepoint.batch_id, savepoint.gold_version)
        restores.finish(spark, cfg, steps)
    return savepoint
