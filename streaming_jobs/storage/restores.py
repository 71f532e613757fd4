"""Restoring a job's checkpoint from a savepoint, in stages a crash cannot leave half done.

A restore changes three things that must move together: the checkpoint (the savepoint's copy
under a new query id), the gold table (back to the savepoint's Delta version) and the job's
progress rows (those after the savepoint removed, the kept ones moved to the new id). A crash
between two of them would leave gold rolled back under a checkpoint that still claims the later
batches (their data lost), or a new checkpoint over gold that still holds them (duplicates).

So a restore is a plan first: ``checkpoints/<job>.restoring.json`` is written (flushed, renamed)
before anything changes, and removed when everything has. Every stage is idempotent, and every
run that takes the checkpoint's lock (`finish_pending`: incremental and continuous runs,
savepoints, restores) finishes a plan it finds before doing anything else, so a restore cut
short at any instant completes at the next run, with nobody's help:

1. gold: Delta ``RESTORE`` to the savepoint's version (when the table is newer);
2. the copy: the savepoint's checkpoint copied to ``checkpoints/.staging/<job>-<stamp>`` (a
   partial copy from a crash is removed first), its ``metadata`` rewritten with the new id;
3. the swap: the live checkpoint renamed to ``checkpoints/.replaced/<job>-<stamp>`` and the
   staged copy renamed in (a rename is atomic; a live checkpoint holding the new id means the
   swap is done);
4. the progress rows: removed after the savepoint's batch, the rest moved to the new id.

``TIDEMARK_FAULT_POINT=restore.<stage>`` ends the process at once (``os._exit``, as a SIGKILL
would) right after that stage: the fault-injection tests use it to prove each window.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from datetime import datetime, timezone
from pathlib import Path

from streaming_jobs.storage import ops_tables
from streaming_jobs.core.checkpoints import query_id
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.core.delta_log import latest_version

STAGES = ("planned", "gold", "copy", "swap", "progress")
FAULT_VARIABLE = "TIDEMARK_FAULT_POINT"


def fault_point(name: str) -> None:
    """End the process here, like a SIGKILL, if ``TIDEMARK_FAULT_POINT`` names this point."""
    if os.environ.get(FAULT_VARIABLE) == name:
        os._exit(137)


def marker(cfg: TidemarkConfig, job: str) -> Path:
    return cfg.paths.checkpoints / f"{job}.restoring.json"


def write_json(path: Path, data: dict) -> None:
    """Write ``path`` whole or not at all: a temporary file, flushed to disk, renamed (the
    rename made durable too)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.tmp")
    with open(temp, "w") as handle:
        handle.write(json.dumps(data))
        handle.flush()
        os.fsync(handle.fileno())
    temp.rename(path)
    _sync_dir(path.parent)


def _sync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable."""
    handle = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def plan(
    cfg: TidemarkConfig, job: str, savepoint_path: Path, batch_id: int, gold_version: int | None
) -> dict:
    """Write the restore's plan (the caller holds the checkpoint's lock); returns it."""
    checkpoint = cfg.paths.checkpoint(job)
    steps = {
        "job": job,
        "savepoint": str(savepoint_path),
        "batch_id": batch_id,
        "gold_version": gold_version,
        "old_id": query_id(checkpoint),
        "new_id": str(uuid.uuid4()),
        "stamp": datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ"),
    }
    write_json(marker(cfg, job), steps)
    fault_point("restore.planned")
    return steps


def finish(spark, cfg: TidemarkConfig, steps: dict) -> None:
    """Carry out (or finish) a planned restore; each stage is idempotent."""
    job = steps["job"]
    checkpoint = cfg.paths.checkpoint(job)
    gold = cfg.paths.table("gold", job)
    version = steps["gold_version"]
    current = latest_version(gold)
    if (
        version is not None
        and current is not None
        and current > version
        and query_id(checkpoint) != steps["new_id"]
    ):
        spark.sql(f"RESTORE TABLE delta.`{gold}` TO VERSION AS OF {version}")
    fault_point("restore.gold")
    if query_id(checkpoint) != steps["new_id"]:
        staged = cfg.paths.checkpoints / ".staging" / f"{job}-{steps['stamp']}"
        if staged.exists():
            shutil.rmtree(staged)  # a copy cut short
        staged.parent.mkdir(parents=True, exist_ok=True)
        # plain copies: file times say "restored now", later than any failure recorded before
        shutil.copytree(Path(steps["savepoint"]) / "checkpoint", staged, copy_function=shutil.copy)
        (staged / "metadata").write_text(json.dumps({"id": steps["new_id"]}) + "\n")
        _sync_dir(staged)
        fault_point("restore.copy")
        if checkpoint.exists():
            aside = cfg.paths.checkpoints / ".replaced" / f"{job}-{steps['stamp']}"
            aside.parent.mkdir(parents=True, exist_ok=True)
            checkpoint.rename(aside)
        staged.rename(checkpoint)
        _sync_dir(checkpoint.parent)
    fault_point("restore.swap")
    ops_tables.delete(
        cfg,
        "stream_progress",
        f"job = {ops_tables.literal(job)} AND batch_id > {steps['batch_id']}",
    )
    if steps["old_id"]:
        # the kept batches join the new query id: one lineage of batches for reconciliation
        ops_tables.update(
            cfg,
            "stream_progress",
            {"query_id": steps["new_id"]},
            f"job = {ops_tables.literal(job)} AND query_id = {ops_tables.literal(steps['old_id'])}",
        )
    fault_point("restore.progress")
    marker(cfg, job).unlink(missing_ok=True)


def pending(cfg: TidemarkConfig, job: str) -> dict | None:
    """The plan of a restore of ``job`` that has not finished, if any."""
    path = marker(cfg, job)
    if not path.exists():
        return None
    return json.loads(path.read_text())


def finish_pending(spark_factory, cfg: TidemarkConfig, job: str) -> bool:
    """Finish a restore of ``job`` cut short (the caller holds the checkpoint's lock); True if
    there was one. ``spark_factory()`` gives a session, only when one is needed."""
    steps = pending(cfg, job)
    if steps is None:
        return False
    finish(spark_factory(), cfg, steps)
    return True
