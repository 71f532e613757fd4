"""Savepoints: a consistent copy of a job's checkpoint, with its gold table's version.

A savepoint is taken between batches: under the checkpoint's lock, so no run is driving the
job (a continuous run holding the lock makes `take` refuse). It copies the checkpoint (offsets,
commits, metadata, state) and records the gold table's Delta version and the last committed
batch. It refuses a checkpoint that `structural_findings` says is broken.

`restore` puts one back, under the lock: the broken checkpoint is moved aside (kept under
``checkpoints/.replaced/`` for inspection), the savepoint's copy takes its place, the gold
table is restored to the recorded version (Delta ``RESTORE``), and the progress rows of the
batches after the savepoint are removed from ``ops/stream_progress`` (the kept ones move to the
restored checkpoint's new query id, see below). The next run then replays
those batches from bronze: the same rows reach gold once, and reconciliation sees one progress
row per batch. Delta's RESTORE keeps the table's idempotency markers, so the restored
checkpoint gets a new query id and the job a new restore epoch: the replayed batches are
written under new keys instead of being skipped as already done.

Layout: ``savepoints/<job>/<taken_at>-b<batch>/{checkpoint/, savepoint.json}``; the newest
``keep`` are kept.
"""

from __future__ import annotations

import json
import shutil
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from pyspark.sql import SparkSession

from streaming_jobs.checkpoints import last_committed_batch
from streaming_jobs.config import TidemarkConfig
from streaming_jobs.lake import table_exists, table_version
from streaming_jobs.operations.health import structural_findings
from streaming_jobs.operations.locks import checkpoint_lock


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


def epoch_path(cfg: TidemarkConfig, job: str) -> Path:
    return cfg.paths.checkpoints / f"{job}.restores"


def restore_epoch(cfg: TidemarkConfig, job: str) -> int:
    """How many times the job's checkpoint was restored (part of its sinks' idempotency keys)."""
    try:
        return int(epoch_path(cfg, job).read_text().strip())
    except (OSError, ValueError):
        return 0


def savepoints(cfg: TidemarkConfig, job: str) -> list[Savepoint]:
    """The job's savepoints, oldest first."""
    folder = cfg.paths.savepoints / job
    found = [Savepoint.read(p) for p in folder.iterdir()
             if (p / "savepoint.json").exists()] if folder.is_dir() else []
    return sorted(found, key=lambda s: (s.taken_at, s.batch_id))


def take(spark: SparkSession, cfg: TidemarkConfig, job: str, *, keep: int = 3,
         holder: str = "a savepoint") -> Savepoint:
    checkpoint = cfg.paths.checkpoint(job)
    with checkpoint_lock(checkpoint, holder):
        batch = last_committed_batch(checkpoint)
        if batch is None:
            raise SavepointError(f"job {job}: checkpoint {checkpoint} has no committed batch "
                                 "yet; run the job once before taking a savepoint")
        broken = structural_findings(checkpoint)
        if broken:
            raise SavepointError(f"job {job}: refusing to save a broken checkpoint ("
                                 f"{broken[0].message}); restore an earlier savepoint instead")
        gold = cfg.paths.table("gold", job)
        version = table_version(spark, gold) if table_exists(spark, gold) else None
        taken_at = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
        target = cfg.paths.savepoints / job / f"{taken_at}-b{batch}"
        staging = target.with_name(f".{target.name}.partial")
        shutil.copytree(checkpoint, staging / "checkpoint")
        (staging / "savepoint.json").write_text(json.dumps(
            {"job": job, "batch_id": batch, "gold_version": version, "taken_at": taken_at}))
        staging.rename(target)  # complete or absent
    for old in savepoints(cfg, job)[:-keep] if keep > 0 else []:
        shutil.rmtree(old.path, ignore_errors=True)
    return Savepoint.read(target)


def restore(spark: SparkSession, cfg: TidemarkConfig, job: str, savepoint: Savepoint | None = None,
            *, holder: str = "a restore") -> Savepoint:
    """Put ``savepoint`` (default: the latest) back as the job's checkpoint; see the module doc."""
    available = savepoints(cfg, job)
    if savepoint is None:
        if not available:
            raise SavepointError(
                f"job {job}: no savepoint under {cfg.paths.savepoints / job} to restore. Take "
                f"them regularly (tidemark savepoint {job}, or the savepoint schedule). Without "
                "one, the job can only be rebuilt from bronze: delete its checkpoint and gold "
                "table and run it again.")
        savepoint = available[-1]
    checkpoint = cfg.paths.checkpoint(job)
    with checkpoint_lock(checkpoint, holder):
        if checkpoint.exists():
            stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
            aside = cfg.paths.checkpoints / ".replaced" / f"{job}-{stamp}"
            aside.parent.mkdir(parents=True, exist_ok=True)
            checkpoint.rename(aside)
        # plain copies: file times say "restored now", later than any failure recorded before
        shutil.copytree(savepoint.path / "checkpoint", checkpoint, copy_function=shutil.copy)
        # Delta does not roll back idempotency markers (txnAppId/txnVersion) on RESTORE, so the
        # replayed batches must write under new keys: a new query id (the Delta sink's key) and
        # a new restore epoch (the MERGE sink's key), or Delta would skip them as done.
        old_id = json.loads((checkpoint / "metadata").read_text())["id"]
        new_id = str(uuid.uuid4())
        (checkpoint / "metadata").write_text(json.dumps({"id": new_id}) + "\n")
        epoch = restore_epoch(cfg, job) + 1
        epoch_path(cfg, job).write_text(f"{epoch}\n")
        gold = cfg.paths.table("gold", job)
        if savepoint.gold_version is not None and table_exists(spark, gold) \
                and table_version(spark, gold) > savepoint.gold_version:
            spark.sql(f"RESTORE TABLE delta.`{gold}` TO VERSION AS OF {savepoint.gold_version}")
        progress = cfg.paths.table("ops", "stream_progress")
        if table_exists(spark, progress):
            spark.sql(f"DELETE FROM delta.`{progress}` "
                      f"WHERE job = '{job}' AND batch_id > {savepoint.batch_id}")
            # the kept batches join the new query id: one lineage of batches for reconciliation
            spark.sql(f"UPDATE delta.`{progress}` SET query_id = '{new_id}' "
                      f"WHERE job = '{job}' AND query_id = '{old_id}'")
    return savepoint
