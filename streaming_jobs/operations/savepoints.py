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
``keep`` are kept. A savepoint folder appears complete or not at all (copied under a hidden
``.partial`` name, then renamed).
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from streaming_jobs.storage import restores
from streaming_jobs.core.checkpoints import last_committed_batch
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.core.delta_log import latest_version
from streaming_jobs.operations.health import structural_findings
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
    path: Path
    batch_id: int
    gold_version: int | None
    taken_at: str

    @classmethod
    def read(cls, path: Path) -> "Savepoint":
        info = json.loads((path / "savepoint.json").read_text())
        return cls(info["job"], path, info["batch_id"], info["gold_version"], info["taken_at"])


def savepoints(cfg: TidemarkConfig, job: str) -> list[Savepoint]:
    """The job's complete savepoints, oldest first (hidden folders are partial copies)."""
    folder = cfg.paths.savepoints / job
    found = []
    for p in sorted(folder.iterdir()) if folder.is_dir() else []:
        if p.name.startswith(".") or not (p / "savepoint.json").exists():
            continue
        try:
            found.append(Savepoint.read(p))
        except (OSError, ValueError, KeyError):
            continue  # unreadable: never chosen for a restore
    return sorted(found, key=lambda s: (s.taken_at, s.batch_id))


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
    target = cfg.paths.savepoints / job / f"{taken_at}-b{batch}"
    # copies cut short by a crash (we hold the lock: no other copy is being made)
    for stale in target.parent.glob(".*.partial") if target.parent.is_dir() else []:
        shutil.rmtree(stale, ignore_errors=True)
    staging = target.with_name(f".{target.name}.partial")
    shutil.copytree(checkpoint, staging / "checkpoint")
    restores.write_json(
        staging / "savepoint.json",
        {"job": job, "batch_id": batch, "gold_version": version, "taken_at": taken_at},
    )
    staging.rename(target)  # complete or absent
    for old in savepoints(cfg, job)[:-keep] if keep > 0 else []:
        shutil.rmtree(old.path, ignore_errors=True)
    return Savepoint.read(target)


def take(cfg: TidemarkConfig, job: str, *, keep: int = 3, holder: str = "a savepoint") -> Savepoint:
    """Take a savepoint of a job nobody runs (`CheckpointBusy` if a run owns it)."""
    with checkpoint_lock(cfg.paths.checkpoint(job), holder):
        return take_locked(cfg, job, keep=keep)


# -- savepoints of running jobs: requests answered by the continuous run ----------------------


def _requests(cfg: TidemarkConfig, job: str) -> Path:
    return cfg.paths.savepoints / job / ".requests"


def request(cfg: TidemarkConfig, job: str, requester: str) -> str:
    """Ask the run that owns ``job``'s checkpoint for a savepoint; returns the request id."""
    folder = _requests(cfg, job)
    folder.mkdir(parents=True, exist_ok=True)
    request_id = f"{datetime.now(timezone.utc):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
    restores.write_json(folder / f"{request_id}.request", {"requester": requester})
    return request_id


def pending(cfg: TidemarkConfig, job: str) -> list[str]:
    """Ids of the savepoint requests for ``job`` that no one has answered yet."""
    folder = _requests(cfg, job)
    return sorted(p.stem for p in folder.glob("*.request")) if folder.is_dir() else []


def answer(
    cfg: TidemarkConfig,
    job: str,
    request_id: str,
    *,
    savepoint: Savepoint | None = None,
    error: str | None = None,
) -> None:
    """Record the outcome of a request (by the run that owns the checkpoint)."""
    folder = _requests(cfg, job)
    restores.write_json(
        folder / f"{request_id}.answer",
        {"savepoint": savepoint.path.name if savepoint else None, "error": error},
    )
    (folder / f"{request_id}.request").unlink(missing_ok=True)


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
    folder = _requests(cfg, job)
    reply = folder / f"{request_id}.answer"
    deadline = time.monotonic() + timeout_seconds
    while not reply.exists():
        if not is_running(cfg.paths.checkpoint(job)):
            (folder / f"{request_id}.request").unlink(missing_ok=True)
            if not reply.exists():  # answered while we looked: use the answer
                return take(cfg, job, keep=keep, holder=holder)
        if time.monotonic() > deadline:
            (folder / f"{request_id}.request").unlink(missing_ok=True)
            raise SavepointError(
                f"job {job}: the run that owns its checkpoint did not answer the savepoint "
                f"request within {timeout_seconds:.0f}s (a batch that takes that long?); the "
                "request was withdrawn. Try again later."
            )
        time.sleep(0.5)
    outcome = json.loads(reply.read_text())
    reply.unlink(missing_ok=True)
    if outcome.get("error"):
        raise SavepointError(
            f"job {job}: the continuous run could not take the savepoint: {outcome['error']}"
        )
    return Savepoint.read(cfg.paths.savepoints / job / outcome["savepoint"])


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
                f"job {job}: no savepoint under {cfg.paths.savepoints / job} to restore. Take "
                f"them regularly (tidemark savepoint {job}, or the savepoint schedule). Without "
                "one, the job can only be rebuilt from bronze: delete its checkpoint and gold "
                "table and run it again."
            )
        savepoint = available[-1]
    with checkpoint_lock(cfg.paths.checkpoint(job), holder):
        # an earlier restore cut short is finished first; then this one, in stages
        restores.finish_pending(lambda: spark, cfg, job)
        steps = restores.plan(cfg, job, savepoint.path, savepoint.batch_id, savepoint.gold_version)
        restores.finish(spark, cfg, steps)
    return savepoint
