"""Spark's event log read back: each Spark job with its streaming query, batch, times and work.

    .venv/bin/python tools/spark_events.py <event log folder or file> [--after EPOCH_S]

A process started with ``spark.eventLog.enabled=true``, ``spark.eventLog.dir=<folder>`` and
``spark.eventLog.compress=false`` writes one log per application (Spark 4: a folder
``eventlog_v2_<app>`` holding ``events_<n>_<app>`` files; an older single file is read too).
For each Spark job: its submission and completion (epoch seconds), the streaming query's id and
batch id Spark sets on a micro-batch's jobs, its description's first line, and its stages' task
time and CPU (the executors' ``executorRunTime`` and ``executorCpuTime``). Task time well above
CPU is time the tasks waited (a cold JVM loading and compiling, a Python worker starting, the
other query's tasks on the same cores). ``tools/benchmarks/latency.py --spark-jobs`` uses it to
say where a restart's first batches went (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

QUERY_ID, BATCH_ID = "sql.streaming.queryId", "streaming.sql.batchId"


@dataclass
class SparkJob:
    job_id: int
    submitted: float  # epoch seconds
    completed: float | None
    query_id: str | None
    batch_id: int | None
    description: str
    stage_ids: tuple[int, ...]
    task_seconds: float = 0.0
    cpu_seconds: float = 0.0

    @property
    def seconds(self) -> float | None:
        return None if self.completed is None else self.completed - self.submitted


@dataclass
class EventLog:
    app_start: float | None  # epoch seconds (the SparkContext's start)
    jobs: list[SparkJob]

    def query_names(self, names) -> dict[str, str]:
        """Query id -> name, from the jobs whose description names one of ``names`` (Spark
        describes a query's jobs by its name, Delta's own jobs by 'Delta: <name>')."""
        found = {}
        for job in self.jobs:
            name = job.description.removeprefix("Delta: ")
            if job.query_id and name in names:
                found.setdefault(job.query_id, name)
        return found


def log_files(where: Path) -> list[Path]:
    """The files of one application's log, in order (a file, or a Spark 4 log folder)."""
    if where.is_file():
        return [where]

    def part(p: Path) -> int:
        number = p.name.split("_")[1]
        return int(number) if number.isdigit() else 0

    files = sorted((p for p in where.glob("events_*") if p.is_file()), key=part)
    if not files:
        raise FileNotFoundError(f"{where}: no events_* file (is this an event log folder?)")
    if any(p.suffix in (".zstd", ".lz4", ".snappy", ".lzf") for p in files):
        raise ValueError(
            f"{where}: the log is compressed; start Spark with spark.eventLog.compress=false"
        )
    return files


def applications(folder: Path) -> list[Path]:
    """The applications' logs under an event log folder, oldest first."""
    logs = [p for p in folder.iterdir() if p.name.startswith(("eventlog_v2_", "local-", "app-"))]
    return sorted(logs, key=lambda p: p.stat().st_mtime)


def read(where: Path) -> EventLog:
    app_start, jobs, stages = None, {}, {}
    for path in log_files(where):
        with open(path, encoding="utf-8") as lines:
            for line in lines:
                event = json.loads(line)
                kind = event.get("Event")
                if kind == "SparkListenerApplicationStart":
                    app_start = event["Timestamp"] / 1000.0
                elif kind == "SparkListenerJobStart":
                    props = event.get("Properties") or {}
                    batch = props.get(BATCH_ID)
                    jobs[event["Job ID"]] = SparkJob(
                        job_id=event["Job ID"],
                        submitted=event["Submission Time"] / 1000.0,
                        completed=None,
                        query_id=props.get(QUERY_ID),
                        batch_id=int(batch) if batch is not None else None,
                        description=(props.get("spark.job.description") or "").split("\n")[0],
                        stage_ids=tuple(event.get("Stage IDs") or ()),
                    )
                elif kind == "SparkListenerJobEnd" and event["Job ID"] in jobs:
                    jobs[event["Job ID"]].completed = event["Completion Time"] / 1000.0
                elif kind == "SparkListenerStageCompleted":
                    info = event["Stage Info"]
                    metrics = {a.get("Name"): a.get("Value") for a in info.get("Accumulables", [])}
                    stages[info["Stage ID"]] = (
                        float(metrics.get("internal.metrics.executorRunTime") or 0) / 1000.0,
                        float(metrics.get("internal.metrics.executorCpuTime") or 0) / 1e9,
                    )
    for job in jobs.values():
        ran = [stages[s] for s in job.stage_ids if s in stages]  # (skipped stages never ran)
        job.task_seconds = sum(r[0] for r in ran)
        job.cpu_seconds = sum(r[1] for r in ran)
    return EventLog(app_start, sorted(jobs.values(), key=lambda j: j.submitted))


def batch_summary(log: EventLog, query_id: str, batch_id: int, since: float) -> dict:
    """One micro-batch's Spark jobs: how many, the first's submission and the last's end
    (seconds after ``since``), and their task time and CPU."""
    jobs = [j for j in log.jobs if j.query_id == query_id and j.batch_id == batch_id]
    if not jobs:
        return {"spark_jobs": 0}
    ends = [j.completed for j in jobs if j.completed is not None]
    return {
        "spark_jobs": len(jobs),
        "first_job_s": round(jobs[0].submitted - since, 2),
        "last_job_end_s": round(max(ends) - since, 2) if ends else None,
        "tasks_s": round(sum(j.task_seconds for j in jobs), 2),
        "cpu_s": round(sum(j.cpu_seconds for j in jobs), 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log", help="an event log folder (eventlog_v2_<app>) or file")
    parser.add_argument("--after", type=float, default=None, help="times from this epoch second")
    args = parser.parse_args(argv)
    log = read(Path(args.log))
    since = args.after if args.after is not None else (log.app_start or 0.0)
    print("| submitted s | took s | tasks s | CPU s | query | batch | description |")
    print("|---:|---:|---:|---:|---|---:|---|")
    for j in log.jobs:
        took = "-" if j.seconds is None else f"{j.seconds:.2f}"
        print(
            f"| {j.submitted - since:.2f} | {took} | {j.task_seconds:.2f} | {j.cpu_seconds:.2f} | "
            f"{(j.query_id or '-')[:8]} | {'-' if j.batch_id is None else j.batch_id} | "
            f"{j.description[:60]} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
