"""Reset a job to nothing (`tidemark rebuild JOB --from-scratch`): its checkpoint, gold table,
savepoints and ops rows go together, so nothing of the old run is counted with the new one.
Readers see no gold until the next run has streamed bronze again; `tidemark rebuild JOB`
without ``--from-scratch`` builds the new version beside the live one instead
(`streaming_jobs.operations.shadow`).

Holding the job's checkpoint lock (refused while a run owns it), it removes, in this order:
the ops rows of the job (``ops/stream_progress``, ``ops/stream_failures``), its savepoints
(they restore a gold table that no longer exists), its gold table and last its checkpoint. A
crash part way leaves a job that the next `rebuild` finishes, and a checkpoint that still
exists is never paired with a gold table that does not. The next run streams all of bronze
again.

It refuses to start while the job fails since its last commit (`refusal`): the rebuilt job
would read the same rows and fail again, with its gold table gone. ``--force`` overrides.

`accept_change` is the other way to run a job changed in a way the check before a batch refuses
(`streaming_jobs.runtime.changes`): the user declares the checkpoint's state fit for the new
version, and nothing is replayed.
"""

from __future__ import annotations

from streaming_jobs.core import locations
from streaming_jobs.storage import ops_tables
from streaming_jobs.core.checkpoints import checkpoint_lock
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.storage.failures import failures_of


class RebuildRefused(RuntimeError):
    """The job fails since its last commit: a rebuild would delete gold, then fail again."""


def failing_since_last_commit(cfg: TidemarkConfig, job: str) -> list[dict]:
    """The failures of ``job`` recorded after its last committed batch (oldest first)."""
    literal = ops_tables.literal(job)
    failures = failures_of(cfg, job)
    if not failures:
        return []
    progress = (
        ops_tables.read(cfg, "stream_progress", where=f"job = {literal}", columns=["ts"])
        if ops_tables.exists(cfg, "stream_progress")
        else []
    )
    last_commit = max((r["ts"] for r in progress if r["ts"] is not None), default=None)
    return sorted(
        (f for f in failures if last_commit is None or f["failed_at"] > last_commit),
        key=lambda f: f["failed_at"],
    )


def refusal(cfg: TidemarkConfig, job: str) -> str | None:
    """Why a rebuild of ``job`` must not start, or None.

    A rebuild deletes gold and streams all of bronze again: a job that fails since its last
    commit would fail on the same rows, and be left with no gold at all (seen: a value that
    could not be written; rebuild deleted 23,797 gold rows, then failed on it again).
    """
    failing = failing_since_last_commit(cfg, job)
    if not failing:
        return None
    last = failing[-1]
    error = " ".join(str(last["error"]).split())[:600]
    return (
        f"job {job} has failed {len(failing)} time(s) since its last committed batch (last "
        f"at {last['failed_at']:%Y-%m-%d %H:%M:%S} UTC: {error}). A rebuild deletes its gold "
        "table and reads the same bronze again, so it would fail on the same rows with "
        "nothing left to serve. Fix the cause first (the job, or the data: see tidemark "
        "health), run the job once, then rebuild; or pass --force to reset it anyway. "
        f"`tidemark rebuild {job}` without --from-scratch builds a fixed version beside the "
        "live one instead, which keeps serving until the new one is swapped in"
    )


def rebuild(
    cfg: TidemarkConfig, job: str, holder: str = "tidemark rebuild", force: bool = False
) -> dict:
    """Reset ``job`` to nothing; returns what was removed. Raises `RebuildRefused` (nothing
    removed) while the job fails since its last commit, unless ``force``."""
    paths = cfg.paths
    checkpoint = paths.checkpoint(job)
    removed = {"progress_rows": 0, "savepoints": 0, "gold": False, "checkpoint": False}
    with checkpoint_lock(checkpoint, holder):
        why = None if force else refusal(cfg, job)
        if why:
            raise RebuildRefused(why)
        predicate = f"job = {ops_tables.literal(job)}"
        for table in ("stream_progress", "stream_late_rows", "stream_failures", "expectations"):
            if ops_tables.exists(cfg, table):
                with ops_tables.locked(cfg, table) as handle:
                    rows = len(handle.read(where=predicate, columns=["job"]))
                    if rows:
                        handle.delete(predicate)
                    if table == "stream_progress":
                        removed["progress_rows"] = rows
        savepoints = paths.savepoints / job
        if locations.exists(savepoints):
            removed["savepoints"] = sum(
                1 for e in locations.items(savepoints) if e.kind == "folder"
            )
            locations.delete_tree(savepoints)
        gold = paths.table("gold", job)
        if locations.exists(gold):
            locations.delete_tree(gold)
            removed["gold"] = True
        if locations.exists(checkpoint):  # its lock (or lease) lives beside it
            locations.delete_tree(checkpoint)
            removed["checkpoint"] = True
    return removed


def accept_change(spark, cfg: TidemarkConfig, spec, holder: str = "tidemark accept") -> dict:
    """Record ``spec``'s current version as fit for its checkpoint's state: the user knows a
    change the check refused is safe (a cast made ``try_cast`` for rows that never failed,
    say), and the next run starts on the checkpoint without comparing. The other way to run a
    changed job, without replaying bronze. Under the checkpoint's lock (`CheckpointBusy` while
    a run owns it); returns the record written."""
    from streaming_jobs.core.versions import REFUSED, write_record
    from streaming_jobs.runtime.changes import new_record
    from streaming_jobs.runtime.gold import gold_query

    checkpoint = cfg.paths.checkpoint(spec.name)
    with checkpoint_lock(checkpoint, holder):
        record = new_record(spec, gold_query(spark, cfg, spec))
        write_record(checkpoint, record)
        refused = locations.Location.of(checkpoint) / REFUSED
        if locations.exists(refused):
            locations.delete(refused)
    return record
