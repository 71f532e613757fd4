"""Reading a streaming checkpoint without Spark: which batches were planned and committed."""

from __future__ import annotations

from pathlib import Path


def _batch_ids(folder: Path) -> list[int]:
    if not folder.is_dir():
        return []
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())


def last_committed_batch(checkpoint: Path) -> int | None:
    ids = _batch_ids(checkpoint / "commits")
    return ids[-1] if ids else None
