"""Rebuild a job from the start of bronze: its checkpoint, gold table, savepoints and ops rows
go together, so nothing of the old run is counted with the new one.

Holding the job's checkpoint lock (refused while a run owns it), it removes, in this order:
the ops rows of the job (``ops/stream_progress``, ``ops/stream_failures``), its savepoints
(they restore a gold table that no longer exists), its gold table and last its checkpoint. A
crash part way leaves a job that the next `rebuild` finishes, and a checkpoint that still
exists is never paired with a gold table that does not. The next run streams all of bronze
again.
"""

from __future__ import annotations

import shutil

from streaming_jobs import ops_tables
from streaming_jobs.checkpoints import checkpoint_lock
from streaming_jobs.config import TidemarkConfig


def rebuild(cfg: TidemarkConfig, job: str, holder: str = "tidemark rebuild") -> dict:
    """Reset ``job`` to nothing; returns what was removed."""
    paths = cfg.paths
    checkpoint = paths.checkpoint(job)
    removed = {"progress_rows": 0, "savepoints": 0, "gold": False, "checkpoint": False}
    with checkpoint_lock(checkpoint, holder):
        predicate = f"job = {ops_tables.literal(job)}"
        for table in ("stream_progress", "stream_late_rows", "stream_failures",
                      "expectations"):
            if ops_tables.exists(cfg, table):
                with ops_tables.locked(cfg, table) as handle:
                    rows = len(handle.read(where=predicate, columns=["job"]))
                    if rows:
                        handle.delete(predicate)
                    if table == "stream_progress":
                        removed["progress_rows"] = rows
        savepoints = paths.savepoints / job
        if savepoints.exists():
            removed["savepoints"] = sum(1 for p in savepoints.iterdir() if p.is_dir())
            shutil.rmtree(savepoints)
        gold = paths.table("gold", job)
        if gold.exists():
            shutil.rmtree(gold)
            removed["gold"] = True
        if checkpoint.exists():  # its lock file lives beside it
            shutil.rmtree(checkpoint)
            removed["checkpoint"] = True
    return removed
