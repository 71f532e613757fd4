"""Restoring a job's checkpoint from a savepoint, in stages a crash cannot leave half done.

A restore changes three things that must move together: the checkpoint (the savepoint's copy
under a new query id), the gold table (back to the savepoint's Delta version) and the job's
progress rows (those after the savepoint removed, the kept ones moved to the new id). A crash
between two of them would leave gold rolled back under a checkpoint that still claims the later
batches (their data lost), or a new checkpoint over gold that still holds them (duplicates).

So a restore is a plan first: ``checkpoints/<job>.restoring.json`` is written whole before
anything changes, and removed when everything has. Every stage is idempotent, and every run
that takes the checkpoint's lock (`finish_pending`: incremental and continuous runs,
savepoints, restores) finishes a plan it finds before doing anything else, so a restore cut
short at any instant completes at the next run, with nobody's help:

1. gold: Delta ``RESTORE`` to the savepoint's version (when the table is newer);
2. the copy: while the live checkpoint still has its old id, it is copied aside to
   ``checkpoints/.replaced/<job>-<stamp>`` (for inspection) and its ``metadata`` removed;
   then everything left in it is removed and the savepoint's files copied in, all but
   ``metadata``;
3. the swap: ``metadata`` written with the new id, last. A live checkpoint holding the new id
   is a finished copy; one without it is copied again from step 2.
4. the progress rows: removed after the savepoint's batch, the rest moved to the new id.

No step renames a folder, so a restore is the same on a local disk and on an object store
(where the copies are made by the server). No query reads the checkpoint meanwhile: the
restorer holds its lock, and whoever takes the lock next finishes the plan first.

``TIDEMARK_FAULT_POINT=restore.<stage>`` ends the process at once (``os._exit``, as a SIGKILL
would) right after that stage: the fault-injection tests use it to prove each window.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from streaming_jobs.core import locations
from streaming_jobs.core.locations import Location
from streaming_jobs.storage import ops_tables
from streaming_jobs.core.checkpoints import query_id, relocate_state_schemas
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.core.delta_log import latest_version

STAGES = ("planned", "gold", "copy", "swap", "progress")
FAULT_VARIABLE = "TIDEMARK_FAULT_POINT"


_FAULT_HITS: dict[str, int] = {}


def fault_point(name: str, reached: Callable[[], bool] | None = None) -> None:
    """End the process here, like a SIGKILL, if ``TIDEMARK_FAULT_POINT`` names this point:
    ``name``, or ``name#k`` for the k-th time this process reaches it (the chaos harness).

    ``reached``, when given, is asked only when the point is named, and a False answer means
    the point was not reached this time (neither counted nor fired): a check that costs a read
    is then paid by the harness's workers alone."""
    wanted = os.environ.get(FAULT_VARIABLE)
    if not wanted or wanted.split("#")[0] != name:
        return
    if reached is not None and not reached():
        return
    _FAULT_HITS[name] = _FAULT_HITS.get(name, 0) + 1
    if "#" not in wanted or int(wanted.split("#")[1]) == _FAULT_HITS[name]:
        os._exit(137)


def marker(cfg: TidemarkConfig, job: str) -> Location:
    return Location.of(cfg.paths.checkpoints) / f"{job}.restoring.json"


def write_json(where: Path | Location, data: dict) -> None:
    """Write ``where`` whole or not at all (flushed to disk, on a local one)."""
    locations.write_bytes(Location.of(where), json.dumps(data).encode())


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
        spark.sql(f"RESTORE TABLE delta.`{Location.of(gold).spark}` TO VERSION AS OF {version}")
    fault_point("restore.gold")
    if query_id(checkpoint) != steps["new_id"]:
        _copy_in(cfg, steps, Location.of(checkpoint))
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
    locations.delete(marker(cfg, job))


def _copy_in(cfg: TidemarkConfig, steps: dict, checkpoint: Location) -> None:
    """Stages 2 and 3: the savepoint's copy in place of the live checkpoint, metadata last."""
    if locations.exists(checkpoint) and query_id(checkpoint) == steps["old_id"]:
        aside = (
            Location.of(cfg.paths.checkpoints) / ".replaced" / f"{steps['job']}-{steps['stamp']}"
        )
        locations.copy_tree(checkpoint, aside)
        locations.delete(checkpoint / "metadata")  # the copy aside is whole from here on
    locations.delete_tree(checkpoint)
    saved = Location.of(steps["savepoint"]) / "checkpoint"
    locations.copy_tree(saved, checkpoint, skip=("metadata",))
    relocate_state_schemas(checkpoint)  # its keyed state's schema files: the copies here
    fault_point("restore.copy")
    locations.write_bytes(
        checkpoint / "metadata", (json.dumps({"id": steps["new_id"]}) + "\n").encode()
    )


def pending(cfg: TidemarkConfig, job: str) -> dict | None:
    """The plan of a restore of ``job`` that has not finished, if any."""
    try:
        return json.loads(locations.read_text(marker(cfg, job)))
    except FileNotFoundError:
        return None


def finish_pending(spark_factory, cfg: TidemarkConfig, job: str) -> bool:
    """Finish a restore of ``job`` cut short (the caller holds the checkpoint's lock); True if
    there was one. ``spark_factory()`` gives a session, only when one is needed."""
    steps = pending(cfg, job)
    if steps is None:
        return False
    finish(spark_factory(), cfg, steps)
    return True
