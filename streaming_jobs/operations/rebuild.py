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

`code_against_checkpoint` and `put_code_back` are the third way (`tidemark code JOB`): the
checkpoint's version record keeps the text of the job's file (`versions.job_source`), so after a
rollback, or a change the check refused, that text can be shown beside the file as it is and
written back. Whether the job is then that version again is read by a new process, as the next
run will load it.
"""

from __future__ import annotations

import difflib
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

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


def accept_change(
    get_spark, cfg: TidemarkConfig, spec, holder: str = "tidemark accept", timeout_seconds=900.0
) -> dict:
    """Record ``spec``'s current version as fit for its checkpoint's state: the user knows a
    change the check refused is safe (a cast made ``try_cast`` for rows that never failed,
    say), and the next run starts on the checkpoint without comparing. The other way to run a
    changed job, without replaying bronze. A continuous run that hosts the job is asked to (it
    records it between two batches and starts the job); otherwise it is done here under the
    checkpoint's lock (`CheckpointBusy` while another run owns it; ``get_spark`` is called only
    then). Returns what was done (`shadow.accept_locked`)."""
    from streaming_jobs.operations.shadow import swap

    return swap(
        get_spark,
        cfg,
        spec.name,
        "accept",
        holder=holder,
        timeout_seconds=timeout_seconds,
        spec=spec,
    )


class CodeNotKept(RuntimeError):
    """The checkpoint's version of a job cannot be put back; the message says why and what to
    do."""


@dataclass(frozen=True)
class CodeAgainstCheckpoint:
    """A job's code as it is, against the version its checkpoint records."""

    job: str
    file: str | None  # the file that declares the job now
    checkpoint_version: str | None  # None: the checkpoint records no version (never ran)
    code_version: str
    differs: tuple[str, ...]  # what differs: "code: <piece>", or a part of the version
    kept: dict | None  # the record's copy of the job's file (`versions.job_source`)

    @property
    def same(self) -> bool:
        return self.checkpoint_version is not None and not self.differs

    def diff(self) -> str:
        """The job's file as it is against the checkpoint's copy (unified diff; empty when
        the texts are equal or no copy is kept)."""
        if not self.kept or not self.file:
            return ""
        try:
            now = Path(self.file).read_text(encoding="utf-8")
        except OSError:
            now = ""
        return "".join(
            difflib.unified_diff(
                now.splitlines(keepends=True),
                self.kept["text"].splitlines(keepends=True),
                fromfile=f"{self.file} (now: version {self.code_version})",
                tofile=f"{self.file} (version {self.checkpoint_version}, the checkpoint's)",
            )
        )


def code_against_checkpoint(cfg: TidemarkConfig, spec) -> CodeAgainstCheckpoint:
    """``spec``'s code against the version its checkpoint records (reads only, no Spark)."""
    return _against(cfg, spec)[1]


def _against(cfg: TidemarkConfig, spec) -> tuple[dict | None, CodeAgainstCheckpoint]:
    from streaming_jobs.core.versions import code_parts, read_record, record_differs, version_of
    from streaming_jobs.runtime.changes import current_parts

    record = read_record(cfg.paths.checkpoint(spec.name))
    parts = current_parts(spec)
    return record, CodeAgainstCheckpoint(
        job=spec.name,
        file=spec.origin,
        checkpoint_version=(record or {}).get("version"),
        code_version=version_of(parts),
        differs=record_differs(record, parts, code_parts(spec, texts=True)) if record else (),
        kept=(record or {}).get("source"),
    )


# run by a new process: the job's version parts as the next run loads them
_PARTS_NOW = (
    "import json, sys\n"
    "from streaming_jobs.core.versions import code_parts\n"
    "from streaming_jobs.runtime.changes import current_parts\n"
    "from streaming_jobs.storage.registry import get_job\n"
    "spec = get_job(sys.argv[1])\n"
    "print(json.dumps({'parts': current_parts(spec), 'texts': code_parts(spec, texts=True)}))\n"
)


def _parts_in_a_new_process(job: str) -> tuple[dict, dict]:
    done = subprocess.run(
        [sys.executable, "-c", _PARTS_NOW, job], capture_output=True, text=True, timeout=600
    )
    if done.returncode != 0:
        raise CodeNotKept(
            f"job {job}: its file was written, and a new process could not load the job "
            f"from it: {(done.stderr.strip().splitlines() or ['no message'])[-1]}"
        )
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return found["parts"], found["texts"]


def put_code_back(cfg: TidemarkConfig, spec) -> str:
    """Write the checkpoint's copy of ``spec``'s file over the file, then check, in a new
    process, that the job is the checkpoint's version again. Returns what was done;
    `CodeNotKept` says why nothing was written, or what still differs."""
    record, state = _against(cfg, spec)
    if record is None or state.checkpoint_version is None:
        raise CodeNotKept(
            f"job {spec.name}: its checkpoint records no version (it never ran here), so there "
            "is no version to put back"
        )
    if state.same:
        return (
            f"job {spec.name}: its code is version {state.checkpoint_version}, its checkpoint's: "
            "nothing to put back"
        )
    if not state.kept or not state.file:
        raise CodeNotKept(
            f"job {spec.name}: its checkpoint's version {state.checkpoint_version} was recorded "
            "without its file (before tidemark kept job files, or the job is declared in no "
            "file): put that version's code back from your version control"
        )
    return _write_back(spec.name, record, state.file, state.kept["text"])


def put_code_back_unloaded(cfg: TidemarkConfig, job: str, why: str) -> str:
    """`put_code_back` for a job whose file does not load now (``why``): the file the record
    names gets the record's copy."""
    from streaming_jobs.core.versions import read_record

    record = read_record(cfg.paths.checkpoint(job)) or {}
    kept = record.get("source") or {}
    if not record.get("version"):
        raise CodeNotKept(
            f"job {job} does not load ({why}), and its checkpoint records no version to put back"
        )
    if not kept.get("file"):
        raise CodeNotKept(
            f"job {job} does not load ({why}); its checkpoint's version {record['version']} was "
            "recorded without its file: put that version's code back from your version control"
        )
    return _write_back(job, record, kept["file"], kept["text"])


def _write_back(job: str, record: dict, file: str, text: str) -> str:
    from streaming_jobs.core.versions import record_differs, version_of

    Path(file).write_text(text, encoding="utf-8")
    parts, texts = _parts_in_a_new_process(job)
    still = record_differs(record, parts, texts)
    wrote = f"job {job}: {file} written as version {record['version']} had it"
    if still:
        raise CodeNotKept(
            f"{wrote}, and the job is version {version_of(parts)}, not its checkpoint's "
            f"{record['version']}: {', '.join(still)} still differ (a stream's "
            "declaration, or tidemark's own stateful code, is not in the job's file): put "
            f"those back too, or rebuild the job (`tidemark rebuild {job}`)"
        )
    return (
        f"{wrote}: the job is its checkpoint's version again, and its runs go on from the "
        "checkpoint"
    )


def code_after_rollback(cfg: TidemarkConfig, spec, version: str) -> str:
    """What a rollback leaves of the job's code to put back, and how."""
    state = code_against_checkpoint(cfg, spec)
    if state.same:
        return f"{spec.name}: version {version} serves again, and the job's code is that version"
    how = (
        f"`tidemark code {spec.name}` shows the difference and `tidemark code {spec.name} "
        f"--put-back` writes {state.file} back as that version had it"
        if state.kept
        else "put that version's code back from your version control (its record predates "
        "kept job files)"
    )
    return (
        f"{spec.name}: version {version} serves again, and the job's code is still version "
        f"{state.code_version}: until it is put back, a run refuses a change its state cannot "
        f"take. {how}"
    )
