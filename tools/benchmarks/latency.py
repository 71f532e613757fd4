"""Benchmark: event-to-gold latency in a continuous run, and recovery from SIGKILL (issue 54).

    make bench-latency                        # 1,000 events/s per stream, 5 minutes, then a kill
    .venv/bin/python tools/benchmarks/latency.py --rate 100 --seconds 60 --jobs events_by_type

One data root on local disk and one ``tidemark continuous`` process hosting the jobs and their
ingestion queries, as ``tidemark live`` hosts them (``--trigger``: live's trigger unless told).

1. **Warm-up** (not timed): ``--warmup-seconds`` of event time at ``--warmup-rate`` events/s
   per stream, one file per stream, landed before the run starts; the clock starts once every
   job has committed a batch over it. Event time is chosen so that an hour closes during the
   measured phase (``zone_revenue_hourly`` emits its windows) and sessions end all along.
2. **Measured**: for ``--seconds`` seconds, every second, one file per stream holding the next
   second of event time at ``--rate`` events/s (the generator's duplicates and malformed lines
   included), written aside and renamed into the landing folder. The landing time is taken
   after the rename.
3. **Recovery** (``--kill``): the process group gets SIGKILL at a random instant of the next
   second, the same command starts again at once, and files keep landing for
   ``--recovery-seconds``. Measured per query: SIGKILL to its first commit after the restart
   (its checkpoint's ``commits/N`` file).
   With ``--dagster`` the run is ``continuous_streaming_job`` launched through ``dagster dev``
   as ``tidemark live`` launches it (the schedules that would share the cores set to January
   1st); the kill is of the run's worker process and its JVM, and ``streaming_restart_sensor``
   starts the next run as shipped: its tick (every 10 s; the first restart of a chain has no
   back-off) and the run's launch are in the figure. It also says when Dagster failed the
   killed run and created and started its restart.

Afterwards, read back from the lake (bronze's ``_source_file`` and ``_ingest_batch_id``,
bronze's Delta log, ``ops/stream_progress``, gold's Delta log):

- **to bronze**: a file's landing to the end of the ingestion batch that read it;
- **processed**: a file's landing to the end of the job's batch that read the bronze version
  holding it (the batch's gold commit included). For ``events_by_type`` (a row per event, as it
  comes) and ``user_activity_profile`` (update mode) this is when the event's row is in gold;
- **final rows** (append-mode windows and sessions): a row is final only once the watermark
  passes its end (``window_end`` + the job's watermark delay), so it is timed from the landing of
  the first file holding an event that far ahead (the event that closes it) to the end of the
  batch whose gold commit holds the row. ``order_payment_match`` rows wait for their 20-minute
  bound by definition: reported as processed only.

With ``--spark-jobs`` the processes write Spark's event log (``<work>/events``), and each
query's first batch after the restart also says when its first Spark job was submitted, how
many it ran, and their task time against their CPU (``tools/spark_events.py``).

Only files landed and processed before the kill count for latency; the batch end is the
progress row's ``timestamp`` + ``batchDuration``. It prints markdown tables (docs/benchmarks.md)
and writes ``--results`` (JSON).
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from streaming_jobs.core import delta_log
from streaming_jobs.core.checkpoints import query_name
from streaming_jobs.core.config import CHECKOUT, TidemarkConfig, default_results
from streaming_jobs.core.locations import Location
from streaming_jobs.intervals import interval_seconds
from streaming_jobs.operations import alerts
from streaming_jobs.services.processes import descendants, free_port, pid_of
from streaming_jobs.storage import ops_tables
from streaming_jobs.storage.generator import EPOCH, GeneratorConfig, generate_by_time, write_files
from streaming_jobs.storage.registry import get_job, registry, stream_schema

sys.path.insert(0, str(CHECKOUT / "tools"))
import spark_events  # noqa: E402 - a tool beside this folder, not a package

LIVE_TRIGGER = 15.0  # orchestration.cli.live.TRIGGER_SECONDS (not imported: no Dagster here)
# the measured phase starts 8.5 minutes past an hour: with a 10-minute watermark the hour's
# windows close 90 s into it
MEASURED_START = EPOCH + timedelta(days=1, hours=1, minutes=8, seconds=30)
FINAL_ROWS = {  # append-mode jobs whose rows are final once the watermark passes this column
    "zone_revenue_hourly": "window_end",
    "user_sessions": "window_end",
    "failed_txn_velocity": "window_end",
}
BOUND_BY_DEFINITION = {"order_payment_match"}


def percentiles(values: list[float]) -> dict:
    if not values:
        return {"n": 0, "p50": None, "p99": None, "max": None}
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]
    return {
        "n": len(ordered),
        "p50": round(statistics.median(ordered), 2),
        "p99": round(p99, 2),
        "max": round(ordered[-1], 2),
    }


def utc_seconds(ts: datetime) -> float:
    return (ts if ts.tzinfo else ts.replace(tzinfo=timezone.utc)).timestamp()


class Lander:
    """Lands one file per stream every second, in a thread; records each file's landing time
    and newest event time."""

    def __init__(self, cfg: TidemarkConfig, files: dict[str, tuple[GeneratorConfig, list]]):
        self.cfg, self.files = cfg, files
        self.landed: dict[str, dict] = {}  # stream/file name -> {stream, t, newest, phase}
        self.phase = "measured"
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.failure: BaseException | None = None

    def land(self, stream: str, number: int, phase: str) -> None:
        gen, lines = self.files[stream]
        (path,) = write_files(
            self.cfg.paths.landing_dir(stream), gen, lines, range(number, number + 1)
        )
        self.landed[f"{stream}/{Path(str(path)).name}"] = {
            "stream": stream,
            "t": time.time(),
            "newest": newest_event(stream, lines[number]),
            "phase": phase,
        }

    def start(self) -> None:
        self.started = time.time()
        self.thread.start()

    def _run(self) -> None:
        try:
            count = min(len(lines) for _, lines in self.files.values())
            for number in range(count):
                wait = self.started + number - time.time()
                if wait > 0 and self.stop.wait(wait):
                    return
                for stream in self.files:
                    self.land(stream, number, self.phase)
        except BaseException as exc:  # reported by the main thread
            self.failure = exc


def newest_event(stream: str, lines: list[str]) -> float | None:
    field, newest = stream_schema(stream).event_time, None
    for line in lines:
        try:
            value = json.loads(line)[field]
            t = utc_seconds(datetime.fromisoformat(value.replace("Z", "+00:00")))
        except (ValueError, KeyError, TypeError, AttributeError):
            continue  # a malformed line
        newest = t if newest is None or t > newest else newest
    return newest


def streams_of(jobs: list[str]) -> list[str]:
    return sorted({s for job in jobs for s in get_job(job).sources})


def generator(stream: str, seed: int, rate: float, start: datetime, prefix: str, files: int):
    return GeneratorConfig(
        stream=stream,
        seed=seed,
        rate=rate,
        start=start,
        files=files,
        late_share=0.0,
        jitter_seconds=2.0,
        file_prefix=prefix,
    )


def wait_until(what: str, condition, timeout: float, every: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(every)
    raise RuntimeError(f"latency benchmark: timed out waiting for {what} ({timeout:.0f} s)")


def commit_times(cfg: TidemarkConfig, query: str) -> dict[int, float]:
    folder = Location.of(cfg.paths.checkpoint(query)).path / "commits"
    out = {}
    for entry in os.scandir(folder) if folder.is_dir() else ():
        if entry.name.isdigit():
            try:
                out[int(entry.name)] = entry.stat().st_mtime
            except FileNotFoundError:
                continue
    return out


def host_env(cfg: TidemarkConfig, events: Path | None) -> dict[str, str]:
    """The environment of the process hosting the queries: the data root, and with ``events``
    Spark's event log (uncompressed, for `spark_events`)."""
    env = {**os.environ, "TIDEMARK_DATA_ROOT": str(cfg.data_root)}
    if events is not None:
        events.mkdir(parents=True, exist_ok=True)
        logging = (
            f"spark.eventLog.enabled=true;spark.eventLog.dir={events.as_uri()};"
            "spark.eventLog.compress=false"
        )
        before = env.get("TIDEMARK_SPARK_CONF", "").strip().rstrip(";")
        env["TIDEMARK_SPARK_CONF"] = f"{before};{logging}" if before else logging
    return env


class Host:
    """The ``tidemark continuous`` process, started and killed as a user's would be."""

    def __init__(
        self, cfg: TidemarkConfig, jobs: list[str], trigger: float, events: Path | None = None
    ):
        self.env = host_env(cfg, events)
        self.command = [
            str(Path(sys.executable).with_name("tidemark")),
            "continuous",
            "--jobs",
            ",".join(jobs),
            "--trigger",
            f"{trigger:g}",
        ]
        self.log = open(Location.of(cfg.data_root).path / "continuous.log", "a")
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            self.command,
            env=self.env,
            cwd=CHECKOUT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def kill(self) -> float:
        os.killpg(self.process.pid, signal.SIGKILL)
        killed = time.time()
        self.process.wait()
        return killed

    def restart(self, killed: float) -> dict:
        """Started again at once, as a supervisor with no back-off would."""
        self.start()
        return {"restart_after_kill_s": round(time.time() - killed, 2)}

    def stop(self) -> int:
        self.process.send_signal(signal.SIGINT)
        try:
            return self.process.wait(timeout=300)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            return -9
        finally:
            self.log.close()


# In --dagster, the schedules that would share the cores (reconciliation, savepoints,
# retention) are set to fire on January 1st only: the machine is quiet but for the run.
QUIET_CRONS = ("TIDEMARK_RECON_CRON", "TIDEMARK_SAVEPOINT_CRON", "TIDEMARK_MAINTENANCE_CRON")


class DagsterHost:
    """The continuous run hosting every job, launched through ``dagster dev`` (webserver,
    daemon, code server) as ``tidemark live`` launches it; killed as a crash would kill it (the
    run's worker process and its JVM, SIGKILL) and started again by ``streaming_restart_sensor``
    as shipped (its tick, its back-off)."""

    def __init__(self, cfg: TidemarkConfig, trigger: float, events: Path | None = None):
        from orchestration.cli.live import DagsterDev

        env = {**host_env(cfg, events), **{name: "0 0 1 1 *" for name in QUIET_CRONS}}
        self.trigger = trigger
        self.dev = DagsterDev(cfg, free_port(), env)
        self.gql = None
        self.run_id: str | None = None

    def start(self) -> None:
        from orchestration.cli.live import CONTINUOUS_JOB, continuous_config

        self.gql = self.dev.start()
        self.run_id = self.gql.launch(CONTINUOUS_JOB, continuous_config(self.trigger))

    def _run(self, run_id: str) -> dict:
        return self.gql.query(
            "query S($id: ID!) { runOrError(runId: $id) { ... on Run { status creationTime "
            "startTime endTime tags { key value } } } }",
            {"id": run_id},
        )["runOrError"]

    def kill(self) -> float:
        from orchestration.defs.streaming.jobs import WORKER_TAG

        tags = {t["key"]: t["value"] for t in self._run(self.run_id)["tags"]}
        if WORKER_TAG not in tags:
            raise RuntimeError(f"latency benchmark: run {self.run_id} names no worker process")
        worker = pid_of(tags[WORKER_TAG])
        for pid in [*descendants(worker), worker]:  # its JVM, then the run's worker
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return time.time()

    def restart(self, killed: float) -> dict:
        """Nothing is started here: the run started by the restart sensor is found, and when
        the killed run was failed, the restart created and started (seconds after the kill)."""
        from orchestration.cli.live import CONTINUOUS_JOB, successor_run

        successor = successor_run(self.gql, self.run_id, timeout=600.0)
        if successor is None:
            raise RuntimeError("latency benchmark: no restart within 600 s; see the Dagster UI")
        failed = self._run(self.run_id)
        self.run_id = successor
        deadline = time.monotonic() + 600
        while (new := self._run(successor))["startTime"] is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"latency benchmark: the restart {successor} did not start")
            time.sleep(0.5)

        def after(t):
            return round(t - killed, 2) if t is not None else None

        return {
            "via": f"Dagster: {CONTINUOUS_JOB} restarted by streaming_restart_sensor",
            "killed_run": {
                "status": failed["status"],
                "ended_after_kill_s": after(failed["endTime"]),
            },
            "restart_created_after_kill_s": after(new["creationTime"]),
            "restart_after_kill_s": after(new["startTime"]),
        }

    def stop(self) -> int:
        """The run terminated through Dagster (it stops at a committed batch), then Dagster:
        0 if the run ended CANCELED or SUCCESS."""
        from orchestration.cli.live import LiveError, settle_runs

        status = "not launched"
        try:
            if self.gql is not None and self.run_id is not None:
                self.gql.terminate(self.run_id)
                try:
                    status = self.gql.wait(self.run_id, timeout=300)
                except LiveError:
                    status = "not ended within 300 s"
                print(f"continuous run {self.run_id[:8]}: {status}", flush=True)
                print(settle_runs(self.gql, 0.0), flush=True)
        finally:
            self.dev.stop()
        return 0 if status in ("CANCELED", "SUCCESS") else 1


def analyse(cfg: TidemarkConfig, jobs: list[str], landed: dict[str, dict], killed: float | None):
    """Per job: to-bronze, processed and final-row latencies of the files landed (and
    processed) before the kill."""
    from deltalake import DeltaTable

    progress = ops_tables.read(
        cfg,
        "stream_progress",
        columns=[
            "job",
            "batch_id",
            "ts",
            "batch_duration_ms",
            "source_versions",
            "sink_version",
            "num_output_rows",
        ],
    )
    ends: dict[tuple[str, int], dict] = {}
    for row in progress:  # the latest row of a batch (a replayed one reports again)
        end = utc_seconds(row["ts"]) + (row["batch_duration_ms"] or 0) / 1000.0
        key = (row["job"], row["batch_id"])
        if key not in ends or end > ends[key]["end"]:
            # a row restored from the checkpoint after the kill has no duration: no end
            ends[key] = {**row, "end": end if row["batch_duration_ms"] is not None else None}

    # file -> ingestion batch -> bronze version, per stream
    bronze_version: dict[str, dict[str, int]] = {}  # stream -> file -> bronze version
    bronze_end: dict[str, float] = {}  # file -> end of the ingestion batch that read it
    for stream in streams_of(jobs):
        table = cfg.paths.table("bronze", stream)
        by_batch = {}
        for version in delta_log.commit_versions(table):
            for action in delta_log.commit_actions(table, version):
                if "txn" in action:
                    by_batch[int(action["txn"]["version"])] = version
        pairs = (
            DeltaTable(str(Location.of(table).path))
            .to_pyarrow_table(columns=["_source_file", "_ingest_batch_id"])
            .group_by(["_source_file", "_ingest_batch_id"])
            .aggregate([])
            .to_pylist()
        )
        files = bronze_version.setdefault(stream, {})
        for pair in pairs:
            name = f"{stream}/{pair['_source_file'].rsplit('/', 1)[-1]}"
            batch = pair["_ingest_batch_id"]
            if batch in by_batch:
                files[name] = by_batch[batch]
            done = ends.get((query_name(stream), batch))
            if done:
                bronze_end[name] = done["end"]

    report = {}
    for job in jobs:
        spec = get_job(job)
        batches = sorted(
            (row for (name, _), row in ends.items() if name == job), key=lambda r: r["batch_id"]
        )
        to_bronze, processed, missing, after_kill = [], [], 0, 0
        for name, info in landed.items():
            if info["phase"] != "measured" or info["stream"] not in spec.sources:
                continue
            if info["t"] >= (killed or float("inf")):
                continue
            version = bronze_version[info["stream"]].get(name)
            batch = next(
                (
                    b
                    for b in batches
                    for s in b["source_versions"] or ()
                    if version is not None
                    and s["source_table"] == info["stream"]
                    and s["version_to"] is not None
                    and s["version_to"] >= version
                ),
                None,
            )
            if batch is None or bronze_end.get(name) is None or batch["end"] is None:
                missing += 1
                continue
            if killed is not None and batch["end"] >= killed:
                after_kill += 1
                continue
            to_bronze.append(bronze_end[name] - info["t"])
            processed.append(batch["end"] - info["t"])
        entry = {
            "to_bronze_s": percentiles(to_bronze),
            "processed_s": percentiles(processed),
            # read by batches of the killed run whose report was lost (restored from the
            # checkpoint with no duration) or not found
            "files_without_a_batch_end": missing,
            "files_done_after_the_kill": after_kill,
        }
        if job in FINAL_ROWS:
            entry["final_rows_s"], entry["rows_emitted_before_final"] = final_rows(
                cfg, spec, FINAL_ROWS[job], batches, landed, killed
            )
        report[job] = entry
    return report


def final_rows(cfg, spec, column: str, batches: list[dict], landed: dict, killed: float | None):
    """For each row the job appended to gold before the kill: the end of its batch minus the
    landing of the file that closed it (the first to hold an event at or past its end + the
    watermark delay); rows closed by the warm-up are left out."""
    import pyarrow.parquet as pq

    delay = interval_seconds(spec.state.watermark or "0 seconds") or 0
    (stream,) = spec.sources
    files = sorted(
        (i for i in landed.values() if i["stream"] == stream and i["newest"] is not None),
        key=lambda i: i["t"],
    )
    running, reach = [], None  # the newest event time landed so far, file by file
    for info in files:
        reach = info["newest"] if reach is None else max(reach, info["newest"])
        running.append(reach)
    gold = Location.of(cfg.paths.table("gold", spec.name)).path
    latencies, early, seen = [], 0, set()
    for batch in batches:  # the Delta sink reports no row count: each batch's commit is read
        if batch["sink_version"] is None or batch["sink_version"] in seen:
            continue
        seen.add(batch["sink_version"])
        if batch["end"] is None or (killed is not None and batch["end"] >= killed):
            continue
        for action in delta_log.commit_actions(gold, batch["sink_version"]):
            added = action.get("add")
            if not added:
                continue
            path = gold / added["path"].replace("%3D", "=").replace("%20", " ")
            for end in pq.read_table(path, columns=[column]).column(column).to_pylist():
                closes = utc_seconds(end) + delay
                at = bisect.bisect_left(running, closes)
                if at == len(files):
                    early += 1  # committed before any file closed it
                    continue
                closer = files[at]
                if closer["phase"] != "measured":
                    continue
                if closer["t"] > batch["end"]:
                    early += 1
                    continue
                latencies.append(batch["end"] - closer["t"])
    return percentiles(latencies), early


def table(report: dict, recovery: dict | None) -> list[str]:
    out = [
        "| job | to bronze p50 / p99 / max s | processed p50 / p99 / max s | final rows p50 / p99 / max s (rows) |",
        "|---|---|---|---|",
    ]

    def cell(p):
        return "-" if not p or not p["n"] else f"{p['p50']} / {p['p99']} / {p['max']}"

    for job, entry in sorted(report.items()):
        final = entry.get("final_rows_s")
        out.append(
            f"| {job} | {cell(entry['to_bronze_s'])} | {cell(entry['processed_s'])} | "
            + (
                f"{cell(final)} ({final['n']:,})"
                if final
                else ("bound by definition" if job in BOUND_BY_DEFINITION else "= processed")
            )
            + " |"
        )
    if recovery:
        out += [
            "",
            "| query | SIGKILL to its first commit after the restart s | its first batch: "
            "triggered at s / took s (planning s), rows |",
            "|---|---:|---|",
        ]
        batches = recovery.get("first_batch", {})
        for query, seconds in sorted(recovery["first_commit_s"].items()):
            b = batches.get(query)
            batch = (
                f"{b['triggered_s']} / {b['duration_s']} ({b['planning_s']}), {b['rows']:,}"
                if b
                else "-"
            )
            jobs = (b or {}).get("spark")
            if jobs and jobs["spark_jobs"]:
                batch += (
                    f"; {jobs['spark_jobs']} Spark jobs from {jobs['first_job_s']} s, tasks "
                    f"{jobs['tasks_s']} s for {jobs['cpu_s']} s of CPU"
                )
            out.append(f"| {query} | {seconds if seconds is not None else 'none'} | {batch} |")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", nargs="*", default=None, help="default: every job")
    parser.add_argument("--rate", type=float, default=1000.0, help="events/s per stream")
    parser.add_argument("--seconds", type=int, default=300, help="the measured phase")
    parser.add_argument("--trigger", type=float, default=LIVE_TRIGGER)
    parser.add_argument("--warmup-seconds", type=int, default=720)
    parser.add_argument("--warmup-rate", type=float, default=100.0)
    parser.add_argument("--kill", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--recovery-seconds", type=int, default=120)
    parser.add_argument(
        "--dagster",
        action="store_true",
        help="host every job in the continuous run launched through dagster dev (as tidemark "
        "live does), restarted after the kill by streaming_restart_sensor, not at once",
    )
    parser.add_argument("--seed", type=int, default=54)
    parser.add_argument("--work", default=None, help="folder for the data root (default: tmp)")
    parser.add_argument("--keep", action="store_true", help="keep the data root")
    parser.add_argument(
        "--spark-jobs",
        action="store_true",
        help="write Spark's event log and say where each first batch after the kill went",
    )
    parser.add_argument(
        "--results",
        default=str(default_results("latency.json")),
        help="where the JSON goes (default: the data root's results/; the committed evidence: "
        "results/latency.json)",
    )
    parser.add_argument(
        "--analyse", metavar="FOLDER", help="read a kept run (--keep) back again, without running"
    )
    args = parser.parse_args(argv)
    if args.analyse:
        work = Path(args.analyse)
        args.keep = True
        return finish(TidemarkConfig.from_env().with_data_root(work / "root"), work, args)
    jobs = args.jobs or sorted(registry())
    if args.dagster and set(jobs) != set(registry()):
        parser.error("--dagster hosts every job, as tidemark live does: leave out --jobs")
    if args.work:
        Path(args.work).mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="tidemark-latency-", dir=args.work))
    cfg = TidemarkConfig.from_env().with_data_root(work / "root")
    rng = random.Random(args.seed)
    streams = streams_of(jobs)
    print(
        f"latency: {', '.join(jobs)} ({', '.join(streams)}), trigger {args.trigger:g} s", flush=True
    )

    warm_start = MEASURED_START - timedelta(seconds=args.warmup_seconds)
    total = args.seconds + (args.recovery_seconds if args.kill else 0)
    files = {}
    for stream in streams:
        warm = generator(stream, args.seed, args.warmup_rate, warm_start, "warmup", 1)
        warm_lines = generate_by_time(warm, args.warmup_seconds)
        write_files(cfg.paths.landing_dir(stream), warm, warm_lines)
        gen = generator(stream, args.seed + 1, args.rate, MEASURED_START, "live", total)
        files[stream] = (gen, generate_by_time(gen, 1.0))
    lander = Lander(cfg, files)
    for stream in streams:  # the warm-up files, as the analysis sees them
        lander.landed[f"{stream}/warmup-{args.seed}-00000.jsonl"] = {
            "stream": stream,
            "t": time.time(),
            "newest": utc_seconds(MEASURED_START),
            "phase": "warm-up",
        }
    events = work / "events" if args.spark_jobs else None
    if args.dagster:
        host = DagsterHost(cfg, args.trigger, events)
    else:
        host = Host(cfg, jobs, args.trigger, events)
    host.start()
    queries = [query_name(s) for s in streams] + jobs
    began = time.time()
    wait_until(
        "every query's first commit over the warm-up",
        lambda: all(commit_times(cfg, q) for q in queries),
        timeout=900,
    )
    time.sleep(2 * args.trigger)
    print(f"warm-up done in {time.time() - began:.0f} s; landing for {total} s", flush=True)

    lander.start()
    killed, recovery = None, None
    try:
        time.sleep(args.seconds)
        if args.kill:
            lander.phase = "recovery"
            time.sleep(rng.uniform(0.0, 1.0))
            killed = host.kill()
            restarted = host.restart(killed)
            first = {}
            deadline = time.monotonic() + 600
            while len(first) < len(queries) and time.monotonic() < deadline:
                for query in queries:
                    if query not in first:
                        after = [t for t in commit_times(cfg, query).values() if t > killed]
                        if after:
                            first[query] = round(min(after) - killed, 2)
                time.sleep(0.1)
            recovery = {
                **restarted,
                "first_commit_s": {q: first.get(q) for q in queries},
                "slowest_s": max(first.values()) if first else None,
                "sensor_first_restart_wait_s": cfg.ops.restart_wait(1),
            }
            print(f"recovery: {json.dumps(recovery)}", flush=True)
        lander.thread.join()
        if lander.failure:
            raise lander.failure
        time.sleep(3 * args.trigger + 30)
    finally:
        lander.stop.set()
        code = host.stop()
    print(f"continuous run stopped (exit {code}); reading the lake back", flush=True)
    (work / "run.json").write_text(
        json.dumps(
            {
                "command": "tools/benchmarks/latency.py " + " ".join(argv or sys.argv[1:]),
                "rate_per_stream": args.rate,
                "seconds": args.seconds,
                "trigger_s": args.trigger,
                "exit_code": code,
                "jobs": jobs,
                "landed": lander.landed,
                "killed": killed,
                "recovery": recovery,
            }
        )
    )
    return finish(cfg, work, args)


def restart_batches(cfg: TidemarkConfig, killed: float) -> dict[str, dict]:
    """Where each query's recovery went: its first batch after the kill, from its progress row:
    when it was triggered (seconds after the kill: the process's start, the query's start and
    its sources' first reads), how long it took, of which query planning, and its rows."""
    rows = ops_tables.read(
        cfg,
        "stream_progress",
        columns=["job", "batch_id", "ts", "batch_duration_ms", "durations_ms", "num_input_rows"],
    )
    first: dict[str, dict] = {}
    for row in sorted(rows, key=lambda r: utc_seconds(r["ts"])):
        started = utc_seconds(row["ts"]) - killed
        if started <= 0 or row["job"] in first or row["batch_duration_ms"] is None:
            continue
        steps = dict(row["durations_ms"] or {})
        first[row["job"]] = {
            "batch": row["batch_id"],
            "triggered_s": round(started, 1),
            "duration_s": round(row["batch_duration_ms"] / 1000.0, 1),
            "planning_s": round(steps.get("queryPlanning", 0) / 1000.0, 1),
            "rows": row["num_input_rows"],
        }
    return first


def restart_spark_jobs(events: Path, recovery: dict, killed: float) -> None:
    """Each query's first batch after the kill, as the restarted process's event log has it:
    its Spark jobs' count, the first one's submission and the last one's end (seconds after
    the kill), their task time and their CPU; and when the new SparkContext started."""
    after = [p for p in spark_events.applications(events) if p.stat().st_mtime > killed]
    if not after:
        recovery["spark_jobs"] = "no event log written after the kill"
        return
    log = spark_events.read(after[0])
    recovery["spark_context_start_s"] = (
        round(log.app_start - killed, 2) if log.app_start is not None else None
    )
    names = log.query_names(set(recovery["first_batch"]))
    ids = {name: query for query, name in names.items()}
    for query, batch in recovery["first_batch"].items():
        if query in ids:
            batch["spark"] = spark_events.batch_summary(log, ids[query], batch["batch"], killed)


ALERT_FIELDS = (
    *("alert_id", "kind", "message", "first_seen", "last_seen", "seen_count"),
    *("resolved_at", "resolution"),
)


def failures(cfg: TidemarkConfig) -> dict[str, list[dict]]:
    """What went wrong during the run, as the product recorded it: each alert incident (a
    restart that failed again refreshes its incident's message with the new error) and each
    query failure. Kept with the figures, since a run's data root goes when it ends."""

    def text(value, limit: int = 2000):
        return None if value is None else str(value)[:limit]

    return {
        "alerts": [{k: text(r[k]) for k in ALERT_FIELDS} for r in alerts.load(cfg)],
        "query_failures": [
            {k: text(v) for k, v in r.items()} for r in ops_tables.read(cfg, "stream_failures")
        ],
    }


def finish(cfg: TidemarkConfig, work: Path, args) -> int:
    run = json.loads((work / "run.json").read_text())
    jobs, killed, recovery = run["jobs"], run["killed"], run["recovery"]
    report = analyse(cfg, jobs, run["landed"], killed)
    if recovery and killed:
        recovery["first_batch"] = restart_batches(cfg, killed)
        if (work / "events").is_dir():
            restart_spark_jobs(work / "events", recovery, killed)
    result = {
        **{k: run[k] for k in ("command", "rate_per_stream", "seconds", "trigger_s", "exit_code")},
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "date": time.strftime("%Y-%m-%d"),
        "jobs": report,
        "recovery": recovery,
        **failures(cfg),
    }
    Path(args.results).write_text(json.dumps(result, indent=1))
    print("\n".join(table(report, recovery)))
    for alert in result["alerts"]:
        print(f"alert {alert['alert_id']}: {alert['message']} (resolved: {alert['resolution']})")
    for failure in result["query_failures"]:
        print(f"query failure: {json.dumps(failure)[:600]}")
    print(f"results: {args.results}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if run["exit_code"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
