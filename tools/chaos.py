"""Fault injection: kill tidemark with SIGKILL at random instants and at named fault points,
restart it, and count what was lost or doubled.

    .venv/bin/python tools/chaos.py --trials 20 --seed 7 --budget-minutes 60 \\
        --points incremental,restore.planned,restore.gold,restore.copy,restore.swap,restore.progress \\
        --results results/chaos.json

Fault points:

- ``incremental``: a worker process ingests the landed events (bronze) and runs the job
  (gold) incrementally; it is killed (SIGKILL, the whole process group: Python and its JVM) at
  an instant drawn uniformly from the length of an uninterrupted run, then run again.
- ``gold.committed``: the events land one file at a time, each ingested and then the job run
  (``waves``); the worker ends like a SIGKILL right after the job's k-th gold write, k drawn
  over the gold commits of uninterrupted waves
  (``TIDEMARK_FAULT_POINT=gold.committed#k``, see `streaming_jobs.runtime.gold`): the batch is in
  gold and its checkpoint has not recorded it, so the waves run again must replay it and write
  nothing twice. A random instant falls in that window rarely. The point follows each gold
  commit that wrote rows (a MERGE or an append of none commits nothing), so every kill lands
  in that window (``gold_ahead_of_checkpoint`` says whether it did). Local data roots only (on
  a store gold is written by Delta's sink or Delta's key).
- ``restore.<stage>``: ``tidemark restore`` ends like a SIGKILL right after that stage
  (``TIDEMARK_FAULT_POINT``, see `streaming_jobs.storage.restores`); the job is then run again.
- ``continuous``: a worker ingests the events, then hosts the job in a continuous run (1 s
  trigger, progress flushed every second) until it is caught up; it is killed at an instant
  drawn over that whole length, then the job is run again, incrementally.
- ``savepoint``: with half the events run, a worker takes a savepoint and is killed at an
  instant drawn over the take's own length; then a savepoint is taken again, restored, and
  the rest of the events run.
- ``alerts``: a worker delivers 16 owed notifications (10 incidents, 6 of them resolved) to a
  webhook on 127.0.0.1 that answers each in 40 ms, killed at an instant drawn over the
  delivery's length; then delivery runs again. The webhook counts notifications lost and
  POSTs repeated (same ``Idempotency-Key``).
- ``maintenance``: with two waves of events run, a worker runs every retention step (OPTIMIZE,
  VACUUM keeping nothing it may delete, ops pruning, the landing archive) and is killed at an
  instant drawn over that run's length; maintenance must then succeed again by itself, and a
  third wave must give the rows it gives after an uninterrupted maintenance.
- ``rebuild`` and ``swap.<stage>``: a job of the harness's own (``chaos_counts``: transactions
  per user per 10-minute window) has run over every event; its code then changes to 15-minute
  windows and ``tidemark rebuild`` builds that version beside the live one and swaps it in
  (``--skip-recon``: the reconciliation before the swap reads and decides, it writes nothing
  the swap depends on).
  ``rebuild`` kills it at an instant drawn over the whole rebuild's length, then runs the
  rebuild again; ``swap.<stage>`` ends it right after that stage of the swap
  (``TIDEMARK_FAULT_POINT``, see `streaming_jobs.storage.swaps`), then runs the job once (that
  run finishes the swap). Right after the kill, gold must hold one version's rows whole (the
  old version's or the new one's, never a mix, never nothing: ``versions_mixed``); after the
  recovery, exactly the rows of an uninterrupted run of the new version.
- ``disk_full.ingest`` / ``disk_full.jobs``: the data root is a small tmpfs (root only) filled
  but for a random share of what ingestion (or, after a full ingestion, the job) writes; the
  step fails on the full disk at that point (its error is kept in the trial's note), space is
  freed, and a plain run must succeed by itself with the uninterrupted rows.

After each trial the recovery run must succeed by itself (else it counts as a manual
intervention), and the outcome is compared with an uninterrupted run on the same events, row
by row: bronze rows lost or duplicated (event, event time, landing file) and gold rows lost or
duplicated. The runs that are not killed (reference, preparation, recovery) share one
SparkSession in the harness's process (``--separate-processes`` gives each its own JVM). Each trial works in its own data root under ``--work``. Results go to a JSON
file; `docs/reliability.md` shows them.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(CHECKOUT))

# The job the trials run, and its streams (`--job`): an append-mode job by default (24-hour
# windows in keyed state), the update-mode one (each batch a MERGE), or the stream-stream join
# (two streams, the join's state in one store per partition). Workers read it from the
# environment the harness sets.
JOBS = {
    "failed_txn_velocity": ("transactions",),
    "user_activity_profile": ("clicks",),
    "order_payment_match": ("orders", "payments"),
}
JOB = os.environ.get("TIDEMARK_CHAOS_JOB", "failed_txn_velocity")
STREAMS = JOBS.get(JOB, ("transactions",))
STAGES = ("planned", "gold", "copy", "swap", "progress")
# points whose trials run JOB (the others have jobs of their own, or none)
JOB_POINTS = (
    "incremental",
    "continuous",
    "gold.committed",
    "savepoint",
    *(f"restore.{s}" for s in STAGES),
)
SWAP_STAGES = ("planned", "keep", "gold", "copy", "checkpoint", "rows")
POINTS = (
    "incremental",
    "continuous",
    "gold.committed",
    *(f"restore.{s}" for s in STAGES),
    "rebuild",
    *(f"swap.{s}" for s in SWAP_STAGES),
    "savepoint",
    "alerts",
    "maintenance",
    "disk_full.ingest",
    "disk_full.jobs",
)
NEEDS_SPARK = (
    "run",
    "waves",
    "run+savepoint",
    "continuous",
    "retake+restore",
    "maintain",
    "ingest",
    "job",
    "swap-run",
    "rebuild",
)
# the swap trials' job, in a folder of its own per version (TIDEMARK_JOBS_PATH)
SWAP_JOB = "chaos_counts"
SWAP_SQL = """-- chaos_counts: transactions per user per window (the chaos harness's swap trials).
-- source: transactions
-- keys: user_id, window_start, window_end
-- measures: n
-- watermark: 5 minutes
select user_id, window.start as window_start, window.end as window_end, count(*) as n
from events
group by user_id, window(event_time, '{minutes} minutes')
"""
# maintenance trials keep nothing they may delete: every removed file, old ops row and archived
# landing file is fair game at once (what VACUUM must still keep, it keeps for its readers)
MAINTENANCE_ENV = {
    "TIDEMARK_VACUUM_RETAIN_HOURS": "0",
    "TIDEMARK_OPS_RETENTION_DAYS": "0",
    "TIDEMARK_LANDING_RETENTION": "archive",
}


# -- the worker: one process (and its JVM) doing one step ----------------------------------------


def worker(root: str, step: str, spark=None) -> int:
    """One step on ``root``: ``run`` (ingest, run the job), ``ingest``, ``job``,
    ``run+savepoint``, ``continuous`` (ingest, then the job in a continuous run until caught
    up), ``savepoint`` (take one), ``retake+restore`` (take one and restore it), ``maintain``
    (every retention step) or ``alerts`` (deliver what is owed)."""
    from streaming_jobs.core.config import TidemarkConfig
    from streaming_jobs.operations import alerts, retention, savepoints
    from streaming_jobs.storage.registry import get_job
    from streaming_jobs.runtime.runner import run_bronze, run_job
    from streaming_jobs.storage.spark import get_spark

    cfg = TidemarkConfig.from_env().with_data_root(root)
    if step in NEEDS_SPARK:
        spark = spark or get_spark(cfg)
        if cfg.on_store:
            from streaming_jobs.storage.spark import use_object_store

            use_object_store(spark, cfg)  # the harness's shared session, on a store root
    print("WORKER STARTED", flush=True)
    started = time.monotonic()
    if step in ("run", "run+savepoint", "continuous", "ingest", "swap-run"):
        for stream in STREAMS:
            run_bronze(spark, cfg, stream)
    if step in ("run", "run+savepoint", "job"):
        run_job(spark, cfg, get_job(JOB))
    if step == "swap-run":
        run_job(spark, cfg, get_job(SWAP_JOB))
    if step == "rebuild":
        from streaming_jobs.operations import shadow

        shadow.build(spark, cfg, get_job(SWAP_JOB), holder="chaos")
        shadow.swap(lambda: spark, cfg, SWAP_JOB, holder="chaos")
    if step == "maintain":
        failed = retention.maintain(spark, cfg).failed
        if failed:
            raise RuntimeError(f"maintenance steps failed: {failed}")
    if step == "continuous":
        _continuous_until_caught_up(spark, cfg)
    if step == "waves":
        _waves(spark, cfg)
    if step in ("run+savepoint", "savepoint", "retake+restore"):
        savepoints.take(cfg, JOB)
    if step == "retake+restore":
        savepoints.restore(spark, cfg, JOB)
    if step == "alerts":
        settings = alerts.DeliverySettings.from_env()
        if alerts.deliver(cfg, settings).failed:
            raise RuntimeError("alert delivery failed")
    print(f"WORKER DONE {time.monotonic() - started:.2f}", flush=True)
    return 0


def _continuous_until_caught_up(spark, cfg) -> None:
    from streaming_jobs.operations.continuous import run_continuous

    quiet = []  # flushes in a row with the job caught up and no new batch

    def on_flush(reports) -> None:
        report = reports[JOB]
        quiet.append(report.caught_up and report.new_batches == 0)

    run_continuous(
        spark,
        cfg,
        jobs=[JOB],
        trigger_seconds=1.0,
        flush_seconds=1.0,
        max_seconds=600,
        on_flush=on_flush,
        holder="chaos",
        should_stop=lambda: quiet[-3:] == [True] * 3,
    )


def _tidemark_env(root: Path, fault: str | None = None) -> dict:
    env = {**os.environ, "TIDEMARK_DATA_ROOT": str(root)}
    env.pop("TIDEMARK_FAULT_POINT", None)
    if fault:
        env["TIDEMARK_FAULT_POINT"] = fault
    return env


def start_worker(root: Path, step: str, fault: str | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, __file__, "worker", str(root), step],
        env=_tidemark_env(root, fault),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


# A SparkSession for the runs that are not killed (reference, preparation, recovery), when the
# caller has one (the tests): each then starts no JVM of its own. The killed runs always get a
# process of their own.
IN_PROCESS = None


def run_worker(root: Path, step: str) -> tuple[bool, float, str]:
    started = time.monotonic()
    if IN_PROCESS is not None:
        try:
            worker(str(root), step, IN_PROCESS)
        except Exception as exc:  # noqa: BLE001 - a failed recovery is a trial's outcome
            return False, time.monotonic() - started, repr(exc)
        return True, time.monotonic() - started, ""
    proc = start_worker(root, step)
    out, _ = proc.communicate()
    done = [line for line in out.splitlines() if line.startswith("WORKER DONE ")]
    # the run's own time, from when its JVM was up (else the whole process's)
    seconds = float(done[-1].split()[-1]) if done else time.monotonic() - started
    return proc.returncode == 0, seconds, out[-3000:]


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


# -- what a data root holds, independently of tidemark's own counters ----------------------------


def delta_rows(table, columns: list[str]) -> Counter:
    from streaming_jobs.core import locations

    if not locations.is_delta_table(table):
        return Counter()
    data = locations.delta_table(table).to_pyarrow_table(columns=columns).to_pylist()
    return Counter(tuple(str(r[c]) for c in columns) for r in data)


def snapshot(root) -> dict:
    """Bronze rows of the job's streams (with their lineage: a line ingested twice is two rows)
    and gold rows."""
    from streaming_jobs.storage.registry import stream_schema

    lake = root / "lake"
    bronze = Counter()
    for stream in STREAMS:
        at = stream_schema(stream).event_time
        bronze += delta_rows(lake / "bronze" / stream, ["event_id", at, "_source_file"])
    return {"bronze": bronze, "gold": delta_rows(lake / "gold" / JOB, gold_columns(JOB))}


def gold_columns(job: str) -> list[str]:
    """The columns a trial compares in ``job``'s gold table: its keys and its measures."""
    from streaming_jobs.storage.registry import get_job

    spec = get_job(job)
    return [*spec.keys, *spec.measures]


def swap_snapshot(root) -> dict:
    """Bronze rows, as `snapshot`, and the swap trials' job's gold rows."""
    return {
        "bronze": snapshot(root)["bronze"],
        "gold": delta_rows(
            root / "lake" / "gold" / SWAP_JOB, ["user_id", "window_start", "window_end", "n"]
        ),
    }


def lineage(root: Path) -> Counter:
    """What reconciliation's lateness replay reads of the progress, per query: the batches its
    rows stand for (a rollup row stands for many), their input and dropped-late rows, and each
    late row that folded batches recorded (once, however often a redone fold wrote it)."""
    from deltalake import DeltaTable

    ops = root / "lake" / "ops"
    out: Counter = Counter()
    if (ops / "stream_progress" / "_delta_log").is_dir():
        table = DeltaTable(str(ops / "stream_progress"))
        names = set(table.schema().to_arrow().names)
        wanted = [
            "job",
            "query_id",
            "batch_id",
            "ts",
            "num_input_rows",
            "rows_dropped_by_watermark",
            "rolled_up_batches",
        ]
        latest: dict[tuple, dict] = {}
        for row in table.to_pyarrow_table(columns=[c for c in wanted if c in names]).to_pylist():
            key = (row["job"], row["query_id"], row["batch_id"])
            if (
                key not in latest
                or row.get("rolled_up_batches")
                or (not latest[key].get("rolled_up_batches") and row["ts"] > latest[key]["ts"])
            ):
                latest[key] = row
        for row in latest.values():
            out[(row["job"], "batches")] += row.get("rolled_up_batches") or 1
            out[(row["job"], "input rows")] += row["num_input_rows"] or 0
            out[(row["job"], "dropped late")] += row["rows_dropped_by_watermark"] or 0
    if (ops / "stream_late_rows" / "_delta_log").is_dir():
        late = (
            DeltaTable(str(ops / "stream_late_rows"))
            .to_pyarrow_table(columns=["job", "source_table", "row_id"])
            .to_pylist()
        )
        out.update(
            {
                (r["job"], r["source_table"], r["row_id"]): 1
                for r in {tuple(r.values()): r for r in late}.values()
            }
        )
    return out


def difference(got: Counter, want: Counter) -> tuple[int, int]:
    """(lost, duplicated): rows of ``want`` missing from ``got``, and rows beyond it."""
    return sum((want - got).values()), sum((got - want).values())


# -- trials ---------------------------------------------------------------------------------------


@dataclass
class Trial:
    point: str
    seed: int
    kill_after_seconds: float | None = None
    events_lost: int = 0
    events_duplicated: int = 0
    gold_rows_lost: int = 0
    gold_rows_duplicated: int = 0
    manual_interventions: int = 0
    alerts_lost: int = 0  # owed notifications the webhook never received
    alerts_reposted: int = 0  # POSTs the webhook received again (same Idempotency-Key)
    # maintenance: differences in what the lateness replay reads (see `lineage`)
    lineage_differences: int = 0
    lineage_compared: int = 0  # entries of `lineage` compared (0: nothing to compare)
    # swap trials: gold right after the kill held neither version whole (a mix, or nothing)
    versions_mixed: int = 0
    # committed batches of the job left with no progress row after the recovery run (their
    # bronze rows would be unexplained to reconciliation)
    unreported_batches: int = 0
    # a writer's batch in two gold commits (None: not measured, a trial of an older harness)
    batches_committed_twice: int | None = None
    # the kill came after a batch's gold commit and before its checkpoint commit: the recovery
    # replayed a batch gold holds (None: not measured)
    gold_ahead_of_checkpoint: bool | None = None
    recover_seconds: float = 0.0
    note: str = ""


@dataclass
class Bench:
    """The events (landed once, copied into each trial's root) and the uninterrupted outcome."""

    work: Path
    events: int
    seed: int
    reference: dict = field(default_factory=dict)
    run_seconds: float = 0.0
    continuous_seconds: float = 0.0  # measured on first use, like the two below
    take_seconds: float = 0.0
    deliver_seconds: float = 0.0
    maintain_seconds: float = 0.0
    maintenance_want: dict = field(default_factory=dict)
    maintenance_waves: list = field(default_factory=list)
    swap_old: dict = field(default_factory=dict)  # the swap job's outcome, old and new version
    swap_new: dict = field(default_factory=dict)
    rebuild_seconds: float = 0.0
    gold_commits: int = 0  # the job's gold commits in the uninterrupted waves
    waves_reference: dict = field(default_factory=dict)  # their outcome
    step_bytes: dict = field(default_factory=dict)  # bytes an ingest and a job run write

    @property
    def landing(self) -> Path:
        return self.work / "events" / "landing"

    def prepare(self, reference: bool = True) -> None:
        """Generate the events, and (``reference``) run them uninterrupted once: the outcome
        the killed runs, the continuous runs and the full disks are judged against."""
        from streaming_jobs.storage.generator import GeneratorConfig, generate, write_files

        for stream in STREAMS:  # one seed: a join's two streams share their keys
            gen = GeneratorConfig(stream=stream, events=self.events, files=6, seed=self.seed)
            write_files(self.landing / stream, gen, generate(gen))
        if not reference:
            return
        root = self.fresh_root("reference")
        ok, seconds, out = run_worker(root, "run")
        if not ok:
            raise RuntimeError(f"chaos: the uninterrupted reference run failed:\n{out}")
        self.run_seconds, self.reference = seconds, snapshot(root)
        if not self.reference["bronze"] or not self.reference["gold"]:
            raise RuntimeError(
                f"chaos: the uninterrupted run of {JOB} left bronze or gold empty ({root}): "
                "its trials would prove nothing; land more events (--events)"
            )

    def fresh_root(self, name: str):
        root = trial_root(self, name)
        land(root, [f for files in self.files() for f in files], fresh=True)
        return root

    def files(self) -> list[list[Path]]:
        """The event files of each of the job's streams, in name order."""
        return [sorted((self.landing / stream).iterdir()) for stream in STREAMS]


# With --store: the trials' data roots are under this s3:// prefix on the project's own
# S3-compatible server (the events and the results stay in --work)
STORE_ROOT: str | None = None


def trial_root(bench: Bench, name: str):
    """A trial's data root: under ``--work``, or under `STORE_ROOT` on the store."""
    if STORE_ROOT is None:
        return bench.work / "trials" / name
    from streaming_jobs.core.config import TidemarkConfig

    return TidemarkConfig.from_env().with_data_root(f"{STORE_ROOT}/trials/{name}").data_root


def judge(trial: Trial, want: dict, root: Path) -> Trial:
    """Compare the root with the uninterrupted outcome ``want``, row by row."""
    got = snapshot(root)

    # source paths differ per root: compare the stream's folder and the file's name only
    def named(rows: Counter) -> Counter:
        return Counter(
            {(e, t, f"{Path(f).parent.name}/{Path(f).name}"): n for (e, t, f), n in rows.items()}
        )

    trial.events_lost, trial.events_duplicated = difference(
        named(got["bronze"]), named(want["bronze"])
    )
    trial.gold_rows_lost, trial.gold_rows_duplicated = difference(got["gold"], want["gold"])
    trial.unreported_batches = len(unreported(root, JOB))
    from streaming_jobs.core.delta_log import batch_marks

    marks = Counter(batch_marks(root / "lake" / "gold" / JOB))
    trial.batches_committed_twice = sum(n - 1 for n in marks.values() if n > 1)
    return trial


def unreported(root, job: str) -> list[int]:
    """The job's committed batches left with no progress row (`progress.unreported_batches`)."""
    from streaming_jobs.core.config import TidemarkConfig
    from streaming_jobs.runtime.progress import unreported_batches

    cfg = TidemarkConfig.from_env().with_data_root(root)
    return unreported_batches(cfg, job, cfg.paths.checkpoint(job))[1]


def kill_during(root: Path, step: str, span: float, rng: random.Random) -> tuple[float, bool]:
    """Start ``step`` in a worker process and SIGKILL it at an instant drawn uniformly over
    ``span`` seconds from when it is up (its JVM, if it needs one). Returns (instant, whether
    the step had finished already)."""
    after = round(rng.uniform(0.0, span), 3)
    proc = start_worker(root, step)
    while (line := proc.stdout.readline()) and not line.startswith("WORKER STARTED"):
        pass
    deadline = time.monotonic() + after
    while (left := deadline - time.monotonic()) > 0 and proc.poll() is None:
        time.sleep(min(left, 0.05))
    finished = proc.poll() is not None
    kill_group(proc)
    return after, finished


def gold_ahead(root, job: str) -> bool:
    """Whether gold holds a batch of the job's query that its checkpoint has not committed."""
    from streaming_jobs.core import locations
    from streaming_jobs.core.checkpoints import query_id
    from streaming_jobs.core.config import TidemarkConfig
    from streaming_jobs.core.delta_log import batch_marks
    from streaming_jobs.core.locations import is_delta_table
    from streaming_jobs.core.delta_log import sink_app_id
    from streaming_jobs.storage.registry import get_job

    paths = TidemarkConfig.from_env().with_data_root(root).paths
    checkpoint, gold = paths.checkpoint(job), paths.table("gold", job)
    identity = query_id(checkpoint)
    if identity is None or not is_delta_table(gold):
        return False  # killed before the query started
    app = sink_app_id(get_job(job), identity)
    written = [batch for writer, batch in batch_marks(gold) if writer == app]
    commits = [int(n) for n in locations.names(checkpoint / "commits") if n.isdigit()]
    return bool(written) and max(written) > max(commits, default=-1)


def recover(trial: Trial, root: Path, step: str, want: dict) -> Trial:
    """The plain run after a kill: it must succeed by itself, then the root is judged."""
    if trial.point in ("incremental", "continuous", "gold.committed"):
        trial.gold_ahead_of_checkpoint = gold_ahead(root, JOB)
    ok, trial.recover_seconds, out = run_worker(root, step)
    if not ok:
        trial.manual_interventions, trial.note = 1, out[-500:]
        return trial
    return judge(trial, want, root)


def incremental_trial(bench: Bench, number: int, rng: random.Random) -> Trial:
    root = bench.fresh_root(f"incremental-{number}")
    trial = Trial("incremental", number)
    trial.kill_after_seconds, finished = kill_during(root, "run", bench.run_seconds, rng)
    trial.note = "finished before the kill" if finished else ""
    return recover(trial, root, "run", bench.reference)


def committed_trial(bench: Bench, number: int, rng: random.Random) -> Trial:
    """The job's events in waves (`_waves`), the run ending like a SIGKILL right after the job's
    k-th gold commit; then the waves run again, to the end."""
    if not bench.waves_reference:
        from streaming_jobs.core.delta_log import batch_marks

        reference = bench.fresh_root("committed-ref")
        pend(reference)
        ok, _, out = run_worker(reference, "waves")
        if not ok:
            raise RuntimeError(f"chaos: the uninterrupted waves failed:\n{out}")
        bench.waves_reference = snapshot(reference)
        bench.gold_commits = len(batch_marks(reference / "lake" / "gold" / JOB))
    root = bench.fresh_root(f"committed-{number}")
    pend(root)
    trial = Trial("gold.committed", number)
    commit = rng.randint(1, bench.gold_commits)
    proc = start_worker(root, "waves", fault=f"gold.committed#{commit}")
    out, _ = proc.communicate()
    trial.note = f"ended after gold commit {commit} of {bench.gold_commits}"
    if proc.returncode != 137:
        trial.manual_interventions = 1
        trial.note += f"; the run did not stop at the fault point: {out[-500:]}"
        return trial
    return recover(trial, root, "waves", bench.waves_reference)


def pend(root: Path) -> None:
    """Move the root's landed files to ``pending/``, whence `_waves` lands them one by one."""
    for stream in STREAMS:
        pending = root / "pending" / stream
        pending.mkdir(parents=True)
        for path in sorted((root / "landing" / stream).iterdir()):
            path.rename(pending / path.name)


def _waves(spark, cfg) -> None:
    """Ingest and run the job once per landing file of each stream, in name order (wave k: the
    k-th file of every stream): each file waits in ``pending/`` (a local root) until its turn.
    A run again first finishes the wave whose files were landed, so its batches are those of
    an uninterrupted run."""
    from streaming_jobs.runtime.runner import run_bronze, run_job
    from streaming_jobs.storage.registry import get_job

    landing = {s: Path(cfg.paths.landing) / s for s in STREAMS}
    pending = {s: Path(cfg.data_root) / "pending" / s for s in STREAMS}

    def wave() -> None:
        for stream in STREAMS:
            run_bronze(spark, cfg, stream)
        run_job(spark, cfg, get_job(JOB))

    if any(any(folder.iterdir()) for folder in landing.values()):
        wave()
    waiting = {s: sorted(pending[s].iterdir()) for s in STREAMS}
    for k in range(max(len(files) for files in waiting.values())):
        for stream, files in waiting.items():
            if k < len(files):
                files[k].rename(landing[stream] / files[k].name)
        wave()


def continuous_trial(bench: Bench, number: int, rng: random.Random) -> Trial:
    """Ingest, then the job continuously until caught up, killed anywhere in that; the job is
    then run incrementally. The job starts on the whole of bronze either way, so its batches
    are those of the uninterrupted run."""
    if bench.continuous_seconds == 0.0:
        ok, bench.continuous_seconds, out = run_worker(
            bench.fresh_root("continuous-ref"), "continuous"
        )
        if not ok:
            raise RuntimeError(f"chaos: the uninterrupted continuous run failed:\n{out}")
    root = bench.fresh_root(f"continuous-{number}")
    trial = Trial("continuous", number)
    trial.kill_after_seconds, finished = kill_during(
        root, "continuous", bench.continuous_seconds, rng
    )
    trial.note = "finished before the kill" if finished else ""
    return recover(trial, root, "run", bench.reference)


def savepoint_trial(bench: Bench, number: int, rng: random.Random, want: dict) -> Trial:
    """Half the events run; a take killed anywhere; then a take and a restore of it must
    work, and the rest of the events give what an uninterrupted run gives (``want``)."""
    root = trial_root(bench, f"savepoint-{number}")
    files = half_landed(bench, root)
    ok, _, out = run_worker(root, "run")
    if not ok:
        raise RuntimeError(f"chaos: preparing a savepoint trial failed:\n{out}")
    if bench.take_seconds == 0.0:  # the length of a take, measured once
        ok, bench.take_seconds, out = run_worker(root, "savepoint")
        if not ok:
            raise RuntimeError(f"chaos: a savepoint take failed:\n{out}")
    trial = Trial("savepoint", number)
    trial.kill_after_seconds, finished = kill_during(root, "savepoint", bench.take_seconds, rng)
    trial.note = "finished before the kill" if finished else ""
    ok, trial.recover_seconds, out = run_worker(root, "retake+restore")
    if not ok:
        trial.manual_interventions, trial.note = 1, out[-500:]
        return trial
    land_rest(root, files)
    return recover(trial, root, "run", want)


def half_landed(bench: Bench, root) -> list[list[Path]]:
    """A root with the first half of each stream's event files landed; returns all the files."""
    files = bench.files()
    land(root, [f for each in files for f in each[: len(each) // 2]], fresh=True)
    return files


def land_rest(root, files: list[list[Path]]) -> None:
    land(root, [f for each in files for f in each[len(each) // 2 :]])


class Webhook:
    """A webhook on 127.0.0.1 that answers each POST after ``delay`` seconds and keeps every
    ``Idempotency-Key`` it received, in order."""

    def __init__(self, delay: float = 0.04) -> None:
        import http.server
        import threading

        received = self.received = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - the library's name
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                time.sleep(delay)
                received.append(self.headers.get("Idempotency-Key"))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):  # quiet
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/alerts"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def owed_alerts(root: Path) -> set[str]:
    """10 incidents, 6 of them resolved: the notifications (``<id>:<event>``) they owe."""
    from streaming_jobs.core.config import TidemarkConfig
    from streaming_jobs.operations import alerts

    cfg = TidemarkConfig.from_env().with_data_root(root)
    for i in range(10):
        alerts.raise_alert(
            cfg, job=JOB, kind=f"chaos_{i}", severity="warning", message=f"chaos alert {i}"
        )
        if i < 6:
            alerts.resolve(cfg, f"chaos_{i}:{JOB}", "chaos: resolved")
    return {
        f"{row['alert_id']}:{event}"
        for row in alerts.load(cfg)
        for event in ("firing", "resolved")
        if event == "firing" or row["resolved_at"] is not None
    }


def alerts_trial(bench: Bench, number: int, rng: random.Random) -> Trial:
    from streaming_jobs.core.config import TidemarkConfig
    from streaming_jobs.operations import alerts

    hook = Webhook()
    saved = os.environ.get("TIDEMARK_ALERT_WEBHOOK_URL")
    os.environ["TIDEMARK_ALERT_WEBHOOK_URL"] = hook.url  # the workers inherit it
    try:
        if bench.deliver_seconds == 0.0:  # the length of a delivery, measured once
            scratch = bench.work / "trials" / "alerts-ref"
            shutil.rmtree(scratch, ignore_errors=True)
            owed_alerts(scratch)
            ok, bench.deliver_seconds, out = run_worker(scratch, "alerts")
            if not ok:
                raise RuntimeError(f"chaos: the uninterrupted alert delivery failed:\n{out}")
            hook.received.clear()
        root = bench.work / "trials" / f"alerts-{number}"
        shutil.rmtree(root, ignore_errors=True)
        want = owed_alerts(root)
        trial = Trial("alerts", number)
        trial.kill_after_seconds, finished = kill_during(root, "alerts", bench.deliver_seconds, rng)
        trial.note = "finished before the kill" if finished else ""
        ok, trial.recover_seconds, out = run_worker(root, "alerts")
        cfg = TidemarkConfig.from_env().with_data_root(root)
        still_owed = [r["alert_id"] for r in alerts.load(cfg) if alerts.owed(r)]
        if not ok or still_owed:
            trial.manual_interventions = 1
            trial.note = out[-500:] if not ok else f"still owed after recovery: {still_owed}"
        trial.alerts_lost = len(want - set(hook.received))
        trial.alerts_reposted = len(hook.received) - len(set(hook.received))
        return trial
    finally:
        hook.close()
        if saved is None:
            os.environ.pop("TIDEMARK_ALERT_WEBHOOK_URL", None)
        else:
            os.environ["TIDEMARK_ALERT_WEBHOOK_URL"] = saved


class environment:  # noqa: N801 - used as a context manager, like a function
    """Variables set in this process (the workers inherit them) for the length of a block."""

    def __init__(self, values: dict[str, str]) -> None:
        self.values, self.saved = values, {}

    def __enter__(self):
        self.saved = {k: os.environ.get(k) for k in self.values}
        os.environ.update(self.values)

    def __exit__(self, *exc):
        for key, value in self.saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def landed_in_waves(bench: Bench, root: Path) -> list[list[Path]]:
    """A root with the first two of three waves of event files landed and run (two commits in
    every table: something for OPTIMIZE, VACUUM and the archive to do); returns the waves."""
    [files] = bench.files()  # the maintenance trials run the default job, over one stream
    third = max(len(files) // 3, 1)
    waves = [files[:third], files[third : 2 * third], files[2 * third :]]
    shutil.rmtree(root, ignore_errors=True)
    (root / "landing" / files[0].parent.name).mkdir(parents=True)
    for wave in waves[:2]:
        land(root, wave)
        ok, _, out = run_worker(root, "run")
        if not ok:
            raise RuntimeError(f"chaos: preparing a maintenance trial failed:\n{out}")
    return waves


def land(root, files: list[Path], fresh: bool = False) -> None:
    """Land ``files`` in the root's landing folder whole, each in its stream's folder (the
    name of the folder it comes from), as a lander does (a hidden name then a rename on a
    disk, one put on a store); ``fresh``: the root emptied first."""
    from streaming_jobs.core import locations

    if fresh:
        locations.delete_tree(root)
    for f in files:
        target = root / "landing" / f.parent.name
        if locations.Location.of(target).on_store:
            locations.write_bytes(target / f.name, f.read_bytes())
            continue
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy(f, target / f".{f.name}")
        (target / f".{f.name}").rename(target / f.name)


def maintenance_trial(bench: Bench, number: int, rng: random.Random) -> Trial:
    """Two waves run, then maintenance (OPTIMIZE, VACUUM keeping nothing it may delete, ops
    pruning, the landing archive) killed anywhere; maintenance again must succeed by itself,
    and the third wave must give what it gives after an uninterrupted maintenance.

    The two waves are run once, in the trials' own folder, and that folder is restored from a
    copy before each trial (checkpoints name their files by absolute path, so the copy comes
    back to the same place)."""
    root = bench.work / "trials" / "maintenance"
    stash = bench.work / "trials" / "maintenance.prepared"
    with environment(MAINTENANCE_ENV):
        if not bench.maintenance_want:  # the uninterrupted outcome and length, measured once
            bench.maintenance_waves = landed_in_waves(bench, root)
            shutil.rmtree(stash, ignore_errors=True)
            shutil.copytree(root, stash, symlinks=True)
            ok, bench.maintain_seconds, out = run_worker(root, "maintain")
            land(root, bench.maintenance_waves[2])
            ok = ok and run_worker(root, "run")[0]
            if not ok:
                raise RuntimeError(f"chaos: the uninterrupted maintenance run failed:\n{out}")
            bench.maintenance_want = {**snapshot(root), "lineage": lineage(root)}
        shutil.rmtree(root)
        shutil.copytree(stash, root, symlinks=True)
        trial = Trial("maintenance", number)
        trial.kill_after_seconds, finished = kill_during(
            root, "maintain", bench.maintain_seconds, rng
        )
        trial.note = "finished before the kill" if finished else ""
        ok, trial.recover_seconds, out = run_worker(root, "maintain")
        if ok:
            land(root, bench.maintenance_waves[2])
            trial = recover(trial, root, "run", bench.maintenance_want)
            trial.lineage_differences = sum(
                difference(lineage(root), bench.maintenance_want["lineage"])
            )
            trial.lineage_compared = len(bench.maintenance_want["lineage"])
        else:
            trial.manual_interventions, trial.note = 1, out[-500:]
        if (
            trial.manual_interventions
            or trial.events_lost
            or trial.events_duplicated
            or trial.gold_rows_lost
            or trial.gold_rows_duplicated
            or trial.lineage_differences
        ):
            kept = root.with_name(f"maintenance-{number}.failed")  # for a look afterwards
            shutil.rmtree(kept, ignore_errors=True)
            shutil.copytree(root, kept, symlinks=True)
        return trial


class SmallDisk:
    """A tmpfs of ``megabytes`` mounted on ``path``: writes past it fail with a real ENOSPC
    ("No space left on device"). Needs root (``mount``)."""

    def __init__(self, path: Path, megabytes: int) -> None:
        self.path, self.megabytes = path, megabytes
        self.ballast = path / ".ballast"

    def __enter__(self) -> SmallDisk:
        if os.geteuid() != 0:
            raise RuntimeError(
                "chaos: the disk_full points mount a small tmpfs and need root; "
                "run them as root or leave them out of --points"
            )
        self.path.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={self.megabytes}m", "tmpfs", str(self.path)],
            check=True,
        )
        return self

    def fill(self, leave: int) -> None:
        """Take all free space but ``leave`` bytes."""
        stat = os.statvfs(self.path)
        size = stat.f_bavail * stat.f_frsize - leave
        if size > 0:
            fd = os.open(self.ballast, os.O_CREAT | os.O_WRONLY)
            try:
                os.posix_fallocate(fd, 0, size)
            finally:
                os.close(fd)

    def empty(self) -> None:
        self.ballast.unlink(missing_ok=True)

    def __exit__(self, *exc) -> None:
        subprocess.run(["umount", "-l", str(self.path)], check=False)


def disk_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def disk_full_trial(bench: Bench, number: int, rng: random.Random, stage: str) -> Trial:
    """The data root's disk fills at a random point of ingestion (``ingest``) or of the job
    (``jobs``, after a full ingestion): the disk is left with a random part of what that step
    writes, free. The step must fail (or finish) without damage: once space is freed, a plain
    run succeeds by itself and gives the uninterrupted rows. The error it gave is kept in the
    trial's note."""
    step = "ingest" if stage == "ingest" else "job"
    if step not in bench.step_bytes:  # what each step writes on an unbounded disk, once
        scratch = bench.fresh_root("disk-ref")
        before = disk_bytes(scratch)
        run_worker(scratch, "ingest")
        bench.step_bytes["ingest"] = disk_bytes(scratch) - before
        before = disk_bytes(scratch)
        run_worker(scratch, "job")
        bench.step_bytes["job"] = disk_bytes(scratch) - before
    trial = Trial(f"disk_full.{stage}", number)
    root = bench.work / "trials" / f"disk_full.{stage}-{number}"
    shutil.rmtree(root, ignore_errors=True)
    need = sum(bench.step_bytes.values()) + disk_bytes(bench.landing)
    with SmallDisk(root, max(64, 4 * need // 2**20)) as disk:
        shutil.copytree(bench.landing, root / "landing", dirs_exist_ok=True)
        if step == "job":
            ok, _, out = run_worker(root, "ingest")
            if not ok:
                raise RuntimeError(f"chaos: ingesting before a disk_full.jobs trial failed:\n{out}")
        leave = int(rng.uniform(0, bench.step_bytes[step]))
        trial.kill_after_seconds = leave  # here: the bytes left free
        disk.fill(leave)
        proc = start_worker(root, step)
        try:
            out, _ = proc.communicate(timeout=900)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            out = "hung on a full disk for 15 minutes: killed"
        trial.note = "finished within the space left" if proc.returncode == 0 else _first_error(out)
        root.with_name(f"{root.name}.worker.log").write_text(out)  # beside, not on, the tmpfs
        disk.empty()
        return recover(trial, root, "run", bench.reference)


def _first_error(out: str) -> str:
    """The line a user reads first: the exception the worker ended with."""
    import re

    raised = [
        line for line in out.splitlines() if re.match(r"[A-Za-z_][\w.]*(Error|Exception): ", line)
    ]
    return raised[-1][:500] if raised else (out.strip().splitlines() or ["no output"])[-1][:500]


def swap_versions(work: Path, minutes: int) -> dict[str, str]:
    """The environment that makes ``minutes``-minute windows the swap job's code."""
    folder = work / "jobs" / f"{minutes}min"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{SWAP_JOB}.sql").write_text(SWAP_SQL.format(minutes=minutes))
    return {"TIDEMARK_JOBS_PATH": str(folder.resolve())}


def swap_prepared(bench: Bench, number: int, point: str):
    """A root where the swap job's old version ran over every event; measured once: both
    versions' uninterrupted outcomes and the length of a rebuild."""
    old, new = swap_versions(bench.work, 10), swap_versions(bench.work, 15)
    if not bench.swap_new:
        reference = bench.fresh_root("swap-new-ref")
        with environment(new):
            ok, _, out = run_worker(reference, "swap-run")
        if not ok:
            raise RuntimeError(f"chaos: the new version's uninterrupted run failed:\n{out}")
        bench.swap_new = swap_snapshot(reference)
    if point == "rebuild" and not bench.rebuild_seconds:
        # a kill at a random instant of a rebuild needs its length: one uninterrupted (the
        # swap's fault points stop at a stage, and their trials judge the outcome the same way)
        root = bench.fresh_root("swap-ref")
        with environment(old):
            ok, _, out = run_worker(root, "swap-run")
        with environment(new):
            rebuilt, bench.rebuild_seconds, out2 = run_worker(root, "rebuild")
        if not (ok and rebuilt):
            raise RuntimeError(f"chaos: the uninterrupted rebuild failed:\n{out}\n{out2}")
        if swap_snapshot(root)["gold"] != bench.swap_new["gold"]:
            raise RuntimeError("chaos: an uninterrupted rebuild did not give the new version")
    root = bench.fresh_root(f"{point}-{number}")
    with environment(old):
        ok, _, out = run_worker(root, "swap-run")
    if not ok:
        raise RuntimeError(f"chaos: preparing a swap trial failed:\n{out}")
    if not bench.swap_old:
        bench.swap_old = swap_snapshot(root)
    return root, old, new


def swap_trial(bench: Bench, number: int, rng: random.Random, point: str) -> Trial:
    """The old version ran; the rebuild of the new one killed (at a random instant, or right
    after a stage of the swap); the gold a reader sees then; the recovery; the outcome."""
    root, _, new = swap_prepared(bench, number, point)
    trial = Trial(point, number)
    with environment(new):
        if point == "rebuild":
            trial.kill_after_seconds, finished = kill_during(
                root, "rebuild", bench.rebuild_seconds, rng
            )
            trial.note = "finished before the kill" if finished else ""
        else:
            killed = subprocess.run(
                # (the reconciliation before the swap is dbt's, tested on its own: left out)
                [
                    str(Path(sys.executable).with_name("tidemark")),
                    "rebuild",
                    SWAP_JOB,
                    "--skip-recon",
                ],
                env=_tidemark_env(root, point),
                capture_output=True,
                text=True,
            )
            if killed.returncode != 137:
                trial.manual_interventions = 1
                trial.note = f"rebuild did not stop at the fault point: {killed.stderr[-500:]}"
                return trial
        seen = swap_snapshot(root)["gold"]
        trial.versions_mixed = int(seen not in (bench.swap_old["gold"], bench.swap_new["gold"]))
        # the user's next step: a killed rebuild is run again; a swap cut short is finished
        # by the next run that takes the checkpoint
        ok, trial.recover_seconds, out = run_worker(
            root, "rebuild" if point == "rebuild" else "swap-run"
        )
    if not ok:
        trial.manual_interventions, trial.note = 1, out[-500:]
        return trial
    got = swap_snapshot(root)
    trial.events_lost, trial.events_duplicated = difference(
        Counter({(e, t): n for (e, t, _), n in got["bronze"].items()}),
        Counter({(e, t): n for (e, t, _), n in bench.swap_new["bronze"].items()}),
    )
    trial.gold_rows_lost, trial.gold_rows_duplicated = difference(
        got["gold"], bench.swap_new["gold"]
    )
    return trial


def restore_trial(stage: str, number: int, root: Path, want: dict) -> Trial:
    """In the restore root (a savepoint taken mid-way, the rest run since): a restore killed
    after ``stage``; the next run must finish it and catch up to the uninterrupted gold."""
    trial = Trial(f"restore.{stage}", number)
    killed = subprocess.run(
        [str(Path(sys.executable).with_name("tidemark")), "restore", JOB],
        env=_tidemark_env(root, f"restore.{stage}"),
        capture_output=True,
        text=True,
    )
    if killed.returncode != 137:
        trial.manual_interventions, trial.note = (
            1,
            f"restore did not stop at the fault point: {killed.stderr[-500:]}",
        )
        return trial
    ok, trial.recover_seconds, out = run_worker(root, "run")
    if not ok:
        trial.manual_interventions, trial.note = 1, out[-500:]
        return trial
    return judge(trial, want, root)


def restore_root(bench: Bench) -> tuple[Path, dict]:
    """A root where the job ran on half the files, took a savepoint, then ran on the rest."""
    root = trial_root(bench, "restore")
    files = half_landed(bench, root)
    ok, _, out = run_worker(root, "run+savepoint")
    if not ok:
        raise RuntimeError(f"chaos: preparing the restore root failed:\n{out}")
    land_rest(root, files)
    ok, _, out = run_worker(root, "run")
    if not ok:
        raise RuntimeError(f"chaos: preparing the restore root failed:\n{out}")
    return root, snapshot(root)  # what every restore and catch-up must give back


def judged_by_reference(point: str) -> bool:
    """The point's trials are judged against the bench's uninterrupted run (the others measure
    their own references: the swap job's versions, the restore root, the maintenance waves)."""
    return point in ("incremental", "continuous") or point.startswith("disk_full.")


def run_trials(
    points: list[str],
    trials: int,
    seed: int,
    work: Path,
    events: int = 20_000,
    budget_seconds: float | None = None,
    spark=None,
    on_trial=None,
) -> list[Trial]:
    """``spark``: run the runs that are not killed in this session (see `IN_PROCESS`);
    ``on_trial(results so far)`` after each trial."""
    global IN_PROCESS
    IN_PROCESS = spark
    rng = random.Random(seed)
    bench = Bench(work, events, seed)
    bench.prepare(reference=any(judged_by_reference(p) for p in points))
    started = time.monotonic()
    out: list[Trial] = []
    restore_at = None
    for number in range(trials):
        for point in points:
            if budget_seconds is not None and time.monotonic() - started > budget_seconds:
                return out
            if point == "incremental":
                out.append(incremental_trial(bench, number, rng))
            elif point == "continuous":
                out.append(continuous_trial(bench, number, rng))
            elif point == "gold.committed":
                out.append(committed_trial(bench, number, rng))
            elif point == "alerts":
                out.append(alerts_trial(bench, number, rng))
            elif point == "maintenance":
                out.append(maintenance_trial(bench, number, rng))
            elif point == "rebuild" or point.startswith("swap."):
                out.append(swap_trial(bench, number, rng, point))
            elif point.startswith("disk_full."):
                out.append(disk_full_trial(bench, number, rng, point.split(".", 1)[1]))
            else:
                restore_at = restore_at or restore_root(bench)
                if point == "savepoint":
                    out.append(savepoint_trial(bench, number, rng, restore_at[1]))
                else:
                    out.append(restore_trial(point.split(".", 1)[1], number, *restore_at))
            print(json.dumps(asdict(out[-1])), flush=True)
            if on_trial:
                on_trial(out)
    return out


def summarize(results: list[Trial]) -> list[dict]:
    rows = []
    for point in dict.fromkeys(t.point for t in results):
        mine = [t for t in results if t.point == point]
        recover = sorted(t.recover_seconds for t in mine)
        rows.append(
            {
                "point": point,
                "trials": len(mine),
                "events_lost": sum(t.events_lost for t in mine),
                "events_duplicated": sum(t.events_duplicated for t in mine),
                "gold_rows_lost": sum(t.gold_rows_lost for t in mine),
                "gold_rows_duplicated": sum(t.gold_rows_duplicated for t in mine),
                "manual_interventions": sum(t.manual_interventions for t in mine),
                "alerts_lost": sum(t.alerts_lost for t in mine),
                "alerts_reposted": sum(t.alerts_reposted for t in mine),
                "lineage_differences": sum(t.lineage_differences for t in mine),
                "versions_mixed": sum(t.versions_mixed for t in mine),
                "unreported_batches": sum(t.unreported_batches for t in mine),
                "batches_committed_twice": _measured_sum(t.batches_committed_twice for t in mine),
                "gold_ahead_of_checkpoint": _measured_sum(t.gold_ahead_of_checkpoint for t in mine),
                "recover_seconds_median": recover[len(recover) // 2] if recover else None,
            }
        )
    return rows


def _measured_sum(values) -> int | None:
    """The sum of what was measured; None when no trial measured it."""
    measured = [v for v in values if v is not None]
    return sum(measured) if measured else None


def merge(sources: list[Path], out: Path) -> list[dict]:
    """Several runs' results files in one (``results/chaos.json``): every run with its
    command, seed and trials, and the summary over all of their trials."""
    runs = []
    for source in sources:
        data = json.loads(source.read_text())
        runs += data.get("runs") or [{k: data[k] for k in ("command", "seed", "trials")}]
    trials = [Trial(**t) for run in runs for t in run["trials"]]
    table = summarize(trials)
    out.write_text(json.dumps({"summary": table, "runs": runs}, indent=1))
    return table


STORE_POINTS = (
    "incremental",
    "continuous",
    "savepoint",
    *(f"restore.{s}" for s in STAGES),
    "rebuild",
    *(f"swap.{s}" for s in SWAP_STAGES),
)


def start_store(work: Path):
    """The project's S3-compatible server for this run (its files in ``work``/s3, a free
    port; the workers inherit the settings), a bucket, and `STORE_ROOT` under it."""
    global STORE_ROOT
    from streaming_jobs.core.config import TidemarkConfig
    from streaming_jobs.core.stores import ensure_bucket
    from streaming_jobs.services import object_store

    os.environ["TIDEMARK_S3_HOME"] = str((work / "s3").resolve())
    os.environ["TIDEMARK_S3_PORT"] = str(object_store.paired_port())
    cfg = TidemarkConfig.from_env()
    server = object_store.start(cfg)
    ensure_bucket(cfg, "tidemark-chaos")
    STORE_ROOT = f"s3://tidemark-chaos/{time.strftime('%Y%m%dT%H%M%S')}"
    return server


def main(argv: list[str] | None = None) -> int:
    global JOB, STREAMS
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["worker"]:
        return worker(argv[1], argv[2])
    if argv[:1] == ["merge"]:  # tools/chaos.py merge OUT IN [IN ...]
        for row in merge([Path(a) for a in argv[2:]], Path(argv[1])):
            print(row)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=20, help="trials per fault point")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--points", default=",".join(POINTS))
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument(
        "--job",
        choices=sorted(JOBS),
        default=JOB,
        help="the job of the points that run one (" + ", ".join(JOB_POINTS) + ")",
    )
    parser.add_argument("--budget-minutes", type=float, default=None)
    parser.add_argument("--work", default=str(CHECKOUT / ".tidemark" / "chaos"))
    parser.add_argument(
        "--results",
        default=None,
        help="where the JSON goes (default: chaos.json in the --work folder; the "
        "committed evidence: results/chaos.json, named explicitly)",
    )
    parser.add_argument(
        "--store",
        action="store_true",
        help="the trials' data roots on the project's own S3-compatible server (started and "
        "stopped here; its files in --work): points incremental, continuous, savepoint, "
        "restore.*, rebuild and swap.*",
    )
    parser.add_argument(
        "--separate-processes",
        action="store_true",
        help="every run in a process (and JVM) of its own, not only the killed",
    )
    args = parser.parse_args(argv)
    args.results = args.results or str(Path(args.work) / "chaos.json")
    points = [p for p in args.points.split(",") if p]
    unknown = [p for p in points if p not in POINTS]
    if unknown:
        parser.error(f"unknown fault point(s) {', '.join(unknown)}; known: {', '.join(POINTS)}")
    JOB, STREAMS = args.job, JOBS[args.job]
    os.environ["TIDEMARK_CHAOS_JOB"] = JOB  # for every worker this process starts
    other = [p for p in points if p not in JOB_POINTS]
    if JOB != "failed_txn_velocity" and other:
        parser.error(f"--job {JOB}: {', '.join(other)} run jobs of their own")
    server = None
    if args.store:
        on_disk_only = [p for p in points if p not in STORE_POINTS]
        if on_disk_only:
            parser.error(f"--store: {', '.join(on_disk_only)} run on a local data root only")
        server = start_store(Path(args.work))
    spark = None
    if not args.separate_processes:
        from streaming_jobs.core.config import TidemarkConfig
        from streaming_jobs.storage.spark import get_spark

        spark = get_spark(TidemarkConfig.from_env().with_data_root(Path(args.work) / "session"))

    def save(results: list[Trial]) -> None:  # after every trial: a run cut short keeps them
        Path(args.results).write_text(
            json.dumps(
                {
                    "command": "tools/chaos.py " + " ".join(argv),
                    "job": JOB,
                    "seed": args.seed,
                    "summary": summarize(results),
                    "trials": [asdict(t) for t in results],
                },
                indent=1,
            )
        )

    try:
        results = run_trials(
            points,
            args.trials,
            args.seed,
            Path(args.work),
            args.events,
            args.budget_minutes * 60 if args.budget_minutes else None,
            spark=spark,
            on_trial=save,
        )
    finally:
        if server is not None:
            from streaming_jobs.core.config import TidemarkConfig
            from streaming_jobs.services import object_store

            object_store.stop(TidemarkConfig.from_env())
    table = summarize(results)
    print(
        "| fault point | trials | events lost | duplicated | gold rows lost | doubled | "
        "manual | alerts lost | reposted | lineage differences | versions mixed | "
        "unreported batches | batches committed twice | recover (median s) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in table:
        print(
            f"| {r['point']} | {r['trials']} | {r['events_lost']} | {r['events_duplicated']} | "
            f"{r['gold_rows_lost']} | {r['gold_rows_duplicated']} | "
            f"{r['manual_interventions']} | {r['alerts_lost']} | {r['alerts_reposted']} | "
            f"{r['lineage_differences']} | {r['versions_mixed']} | "
            f"{r.get('unreported_batches', 0)} | "
            f"{'not measured' if r.get('batches_committed_twice') is None else r['batches_committed_twice']} | "
            f"{r['recover_seconds_median']:.1f} |"
        )
    bad = sum(
        r.get(k) or 0
        for r in table
        for k in (
            "events_lost",
            "events_duplicated",
            "gold_rows_lost",
            "gold_rows_duplicated",
            "manual_interventions",
            "alerts_lost",
            "lineage_differences",
            "versions_mixed",
            "unreported_batches",
            "batches_committed_twice",
        )
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
