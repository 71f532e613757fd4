"""Fault injection: kill tidemark with SIGKILL at random instants and at named fault points,
restart it, and count what was lost or doubled.

    .venv/bin/python tests/chaos.py --trials 20 --seed 7 --budget-minutes 60 \\
        --points incremental,restore.planned,restore.gold,restore.copy,restore.swap,restore.progress \\
        --results RELIABILITY.results.json

Fault points:

- ``incremental``: a worker process ingests the landed events (bronze) and runs the job
  (gold) incrementally; it is killed (SIGKILL, the whole process group: Python and its JVM) at
  an instant drawn uniformly from the length of an uninterrupted run, then run again.
- ``restore.<stage>``: ``tidemark restore`` ends like a SIGKILL right after that stage
  (``TIDEMARK_FAULT_POINT``, see `streaming_jobs.restores`); the job is then run again.

After each trial the recovery run must succeed by itself (else it counts as a manual
intervention), and the outcome is compared with an uninterrupted run on the same events, row
by row: bronze rows lost or duplicated (event, event time, landing file) and gold rows lost or
duplicated. Each trial works in its own data root under ``--work``. Results go to a JSON
file; `RELIABILITY.md` shows them.
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

JOB = "failed_txn_velocity"
STAGES = ("planned", "gold", "copy", "swap", "progress")
POINTS = ("incremental", *(f"restore.{s}" for s in STAGES))


# -- the worker: one process (and its JVM) doing one step ----------------------------------------

def worker(root: str, step: str, spark=None) -> int:
    """Ingest and run the job on ``root`` (and take a savepoint with ``run+savepoint``)."""
    from streaming_jobs.config import TidemarkConfig
    from streaming_jobs.operations.savepoints import take
    from streaming_jobs.registry import get_job
    from streaming_jobs.runner import run_bronze, run_job
    from streaming_jobs.spark import get_spark

    cfg = TidemarkConfig.from_env().with_data_root(root)
    spark = spark or get_spark(cfg)
    print("WORKER STARTED", flush=True)
    started = time.monotonic()
    if step in ("run", "run+savepoint"):
        run_bronze(spark, cfg, "transactions")
        run_job(spark, cfg, get_job(JOB))
        if step == "run+savepoint":
            take(cfg, JOB)
    print(f"WORKER DONE {time.monotonic() - started:.2f}", flush=True)
    return 0


def _tidemark_env(root: Path, fault: str | None = None) -> dict:
    env = {**os.environ, "TIDEMARK_DATA_ROOT": str(root)}
    env.pop("TIDEMARK_FAULT_POINT", None)
    if fault:
        env["TIDEMARK_FAULT_POINT"] = fault
    return env


def start_worker(root: Path, step: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, __file__, "worker", str(root), step],
                            env=_tidemark_env(root), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


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

def delta_rows(table: Path, columns: list[str]) -> Counter:
    from deltalake import DeltaTable

    if not (table / "_delta_log").is_dir():
        return Counter()
    data = DeltaTable(str(table)).to_pyarrow_table(columns=columns).to_pylist()
    return Counter(tuple(str(r[c]) for c in columns) for r in data)


def snapshot(root: Path) -> dict:
    """Bronze rows (with their lineage: a line ingested twice is two rows) and gold rows."""
    lake = root / "lake"
    return {"bronze": delta_rows(lake / "bronze" / "transactions",
                                 ["event_id", "event_time", "_source_file"]),
            "gold": delta_rows(lake / "gold" / JOB, ["user_id", "window_start", "window_end",
                                                      "failed_count"])}


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

    @property
    def landing(self) -> Path:
        return self.work / "events" / "landing"

    def prepare(self) -> None:
        from streaming_jobs.generator import GeneratorConfig, generate, write_files

        gen = GeneratorConfig(stream="transactions", events=self.events, files=6, seed=self.seed)
        write_files(self.landing / "transactions", gen, generate(gen))
        root = self.fresh_root("reference")
        ok, seconds, out = run_worker(root, "run")
        if not ok:
            raise RuntimeError(f"chaos: the uninterrupted reference run failed:\n{out}")
        self.run_seconds, self.reference = seconds, snapshot(root)

    def fresh_root(self, name: str) -> Path:
        root = self.work / "trials" / name
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(self.landing, root / "landing")
        return root


def judge(trial: Trial, want: dict, root: Path) -> Trial:
    """Compare the root with the uninterrupted outcome ``want``, row by row."""
    got = snapshot(root)
    # source paths differ per root: compare the file names only
    def named(rows: Counter) -> Counter:
        return Counter({(e, t, Path(f).name): n for (e, t, f), n in rows.items()})

    trial.events_lost, trial.events_duplicated = difference(named(got["bronze"]),
                                                            named(want["bronze"]))
    trial.gold_rows_lost, trial.gold_rows_duplicated = difference(got["gold"], want["gold"])
    return trial


def incremental_trial(bench: Bench, number: int, rng: random.Random) -> Trial:
    root = bench.fresh_root(f"incremental-{number}")
    trial = Trial("incremental", number, kill_after_seconds=round(rng.uniform(
        0.0, bench.run_seconds), 2))
    proc = start_worker(root, "run")
    # the instant is drawn over the run itself, from when its JVM is up
    while (line := proc.stdout.readline()) and not line.startswith("WORKER STARTED"):
        pass
    deadline = time.monotonic() + trial.kill_after_seconds
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    finished = proc.poll() is not None
    kill_group(proc)
    trial.note = "finished before the kill" if finished else ""
    ok, trial.recover_seconds, out = run_worker(root, "run")
    if not ok:
        trial.manual_interventions, trial.note = 1, out[-500:]
        return trial
    return judge(trial, bench.reference, root)


def restore_trial(stage: str, number: int, root: Path, want: dict) -> Trial:
    """In the restore root (a savepoint taken mid-way, the rest run since): a restore killed
    after ``stage``; the next run must finish it and catch up to the uninterrupted gold."""
    trial = Trial(f"restore.{stage}", number)
    killed = subprocess.run([str(Path(sys.executable).with_name("tidemark")), "restore", JOB],
                            env=_tidemark_env(root, f"restore.{stage}"), capture_output=True,
                            text=True)
    if killed.returncode != 137:
        trial.manual_interventions, trial.note = 1, f"restore did not stop at the fault point: " \
                                                    f"{killed.stderr[-500:]}"
        return trial
    ok, trial.recover_seconds, out = run_worker(root, "run")
    if not ok:
        trial.manual_interventions, trial.note = 1, out[-500:]
        return trial
    return judge(trial, want, root)


def restore_root(bench: Bench) -> tuple[Path, dict]:
    """A root where the job ran on half the files, took a savepoint, then ran on the rest."""
    root = bench.work / "trials" / "restore"
    shutil.rmtree(root, ignore_errors=True)
    files = sorted((bench.landing / "transactions").iterdir())
    target = root / "landing" / "transactions"
    target.mkdir(parents=True)
    for f in files[:len(files) // 2]:
        shutil.copy(f, target / f.name)
    ok, _, out = run_worker(root, "run+savepoint")
    if not ok:
        raise RuntimeError(f"chaos: preparing the restore root failed:\n{out}")
    for f in files[len(files) // 2:]:
        shutil.copy(f, target / f".{f.name}")
        (target / f".{f.name}").rename(target / f.name)
    ok, _, out = run_worker(root, "run")
    if not ok:
        raise RuntimeError(f"chaos: preparing the restore root failed:\n{out}")
    return root, snapshot(root)  # what every restore and catch-up must give back


def run_trials(points: list[str], trials: int, seed: int, work: Path, events: int = 20_000,
               budget_seconds: float | None = None, spark=None) -> list[Trial]:
    """``spark``: run the runs that are not killed in this session (see `IN_PROCESS`)."""
    global IN_PROCESS
    IN_PROCESS = spark
    rng = random.Random(seed)
    bench = Bench(work, events, seed)
    bench.prepare()
    started = time.monotonic()
    out: list[Trial] = []
    restore_at = None
    for number in range(trials):
        for point in points:
            if budget_seconds is not None and time.monotonic() - started > budget_seconds:
                return out
            if point == "incremental":
                out.append(incremental_trial(bench, number, rng))
            else:
                restore_at = restore_at or restore_root(bench)
                out.append(restore_trial(point.split(".", 1)[1], number, *restore_at))
            print(json.dumps(asdict(out[-1])), flush=True)
    return out


def summarize(results: list[Trial]) -> list[dict]:
    rows = []
    for point in dict.fromkeys(t.point for t in results):
        mine = [t for t in results if t.point == point]
        recover = sorted(t.recover_seconds for t in mine)
        rows.append({
            "point": point, "trials": len(mine),
            "events_lost": sum(t.events_lost for t in mine),
            "events_duplicated": sum(t.events_duplicated for t in mine),
            "gold_rows_lost": sum(t.gold_rows_lost for t in mine),
            "gold_rows_duplicated": sum(t.gold_rows_duplicated for t in mine),
            "manual_interventions": sum(t.manual_interventions for t in mine),
            "recover_seconds_median": recover[len(recover) // 2] if recover else None,
        })
    return rows


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["worker"]:
        return worker(argv[1], argv[2])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=20, help="trials per fault point")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--points", default=",".join(POINTS))
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--budget-minutes", type=float, default=None)
    parser.add_argument("--work", default=str(CHECKOUT / ".tidemark" / "chaos"))
    parser.add_argument("--results", default=str(CHECKOUT / "RELIABILITY.results.json"))
    args = parser.parse_args(argv)
    points = [p for p in args.points.split(",") if p]
    unknown = [p for p in points if p not in POINTS]
    if unknown:
        parser.error(f"unknown fault point(s) {', '.join(unknown)}; known: {', '.join(POINTS)}")
    results = run_trials(points, args.trials, args.seed, Path(args.work), args.events,
                         args.budget_minutes * 60 if args.budget_minutes else None)
    table = summarize(results)
    Path(args.results).write_text(json.dumps({
        "command": "tests/chaos.py " + " ".join(argv), "seed": args.seed,
        "summary": table, "trials": [asdict(t) for t in results]}, indent=1))
    print("| fault point | trials | events lost | duplicated | gold rows lost | doubled | "
          "manual | recover (median s) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in table:
        print(f"| {r['point']} | {r['trials']} | {r['events_lost']} | {r['events_duplicated']} | "
              f"{r['gold_rows_lost']} | {r['gold_rows_duplicated']} | "
              f"{r['manual_interventions']} | {r['recover_seconds_median']:.1f} |")
    bad = sum(r[k] for r in table for k in ("events_lost", "events_duplicated", "gold_rows_lost",
                                             "gold_rows_duplicated", "manual_interventions"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
