"""Reading a streaming checkpoint without Spark: its identity, planned and committed batches."""

from __future__ import annotations

import json
from pathlib import Path


def _batch_ids(folder: Path) -> list[int]:
    if not folder.is_dir():
        return []
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())


def last_committed_batch(checkpoint: Path) -> int | None:
    ids = _batch_ids(checkpoint / "commits")
    return ids[-1] if ids else None


def last_planned_batch(checkpoint: Path) -> int | None:
    ids = _batch_ids(checkpoint / "offsets")
    return ids[-1] if ids else None


def query_id(checkpoint: Path) -> str | None:
    """The query's id, written in ``metadata`` when the checkpoint is created.

    It is the checkpoint's identity: a checkpoint deleted and created again, or restored from a
    savepoint (which gets a new id), is a new query. Sinks key their idempotent writes by it.
    """
    try:
        return json.loads((checkpoint / "metadata").read_text())["id"]
    except (OSError, ValueError, KeyError):
        return None
