"""Benchmark: the fixed cost of a micro-batch, per job and for ingestion (issue 17).

    make bench-batch-cost                                              # every job, 12 waves
    .venv/bin/python tools/benchmarks/batch_cost.py --jobs events_by_type --waves 4   # quick

A continuous run at a low rate lives on this cost: each micro-batch carries a handful of
events, so what a batch costs whatever it carries decides how many events a second a query
can keep up with. For each job, on a data root of its own, in one process (one SparkSession,
``local[2]``), it runs what ``tidemark live`` runs: the continuous run hosting the job's
ingestion queries (landing -> bronze) and the job (bronze -> gold), ``--trigger-seconds``
apart. After a warm-up wave it lands ``--waves`` waves of ``--events`` events per source
stream, each once every query has read the one before (``--wave-seconds`` at most), then
stops and reads every batch back from ``ops/stream_progress``. With ``--quiet-seconds`` the
streams stay quiet that long before each wave after the warm-up, as a sparse stream does
(Spark ends Python workers idle for a minute: a keyed-state job's next batch starts new ones).
With ``--store`` every data root is on the project's S3 server (started for the run on
127.0.0.1): the same batches with their checkpoints, Delta commits and landing on an object
store.

Per query it reports, over the batches that carried input: the batch's wall time
(``batchDuration``, median and worst), and where it went: Spark's own phases
(``durationMs``: ``addBatch`` is the plan and the sink's write, ``walCommit`` and
``commitOffsets`` the checkpoint's offset and commit files, ``latestOffset`` and
``queryPlanning`` the source and the planner) and the state stores' commit time. Goal (issue
17): under 1 s a batch for every query. It prints a markdown table (paste it into
docs/benchmarks.md) and writes every batch to ``--results`` (JSON).
"""

from __future__ import annotations

import argparse
import sys
import json
import platform
import statistics
import tempfile
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path

from streaming_jobs.core import locations
from streaming_jobs.storage import ops_tables
from streaming_jobs.core.checkpoints import query_name
from streaming_jobs.core.config import TidemarkConfig, default_results
from streaming_jobs.storage.generator import EPOCH, GeneratorConfig, generate, write_files
from streaming_jobs.operations.continuous import run_continuous
from streaming_jobs.storage.registry import get_job, registry
from streaming_jobs.storage.spark import get_spark
from streaming_jobs.runtime.tables import ensure_lake

PHASES = ("addBatch", "walCommit", "commitOffsets", "latestOffset", "queryPlanning", "getBatch")


def waves_of(stream: str, waves: int, events: int, seed: int) -> list[list[str]]:
    """``waves`` files of ``events`` clean events each, event time moving forward by a minute
    a wave (watermarks advance, windows close as they would at a low steady rate)."""
    gen = GeneratorConfig(
        stream=stream,
        events=events * waves,
        files=waves,
        seed=seed,
        rate=events / 60.0,
        late_share=0.0,
        duplicate_share=0.0,
        malformed_share=0.0,
        jitter_seconds=5.0,
        start=EPOCH + timedelta(days=1),
    )
    return generate(gen)


class StepTimer:
    """``--profile``: the wall time of each step inside the foreachBatch functions (they run in
    this process, on py4j's callback thread), by wrapping the functions those modules call."""

    STEPS = {
        "streaming_jobs.runtime.ingestion": ("split", "record", "append_once"),
        "streaming_jobs.runtime.gold": (
            "counts",
            "record",
            "merge_once",
            "merge_marked",
            "batch_written",
        ),
    }

    def __init__(self) -> None:
        self.seconds: dict[str, list[float]] = {}
        self.undo: list[tuple[object, str, object]] = []

    def install(self) -> None:
        import importlib

        for module_name, names in self.STEPS.items():
            module = importlib.import_module(module_name)
            for name in names:
                original = getattr(module, name)
                self.undo.append((module, name, original))
                setattr(
                    module, name, self._timed(f"{module_name.rsplit('.', 1)[1]}.{name}", original)
                )

    def _timed(self, label: str, fn):
        def timed(*args, **kwargs):
            started = time.monotonic()
            try:
                return fn(*args, **kwargs)
            finally:
                where = next((f" {a.parent.name}" for a in args if isinstance(a, Path)), "")
                self.seconds.setdefault(label + where, []).append(time.monotonic() - started)

        return timed

    def uninstall(self) -> None:
        for module, name, original in self.undo:
            setattr(module, name, original)

    def table(self) -> list[str]:
        out = [
            "| step (inside foreachBatch) | calls | s median | s worst |",
            "|---|---:|---:|---:|",
        ]
        for label, times in sorted(self.seconds.items()):
            out.append(
                f"| `{label}` | {len(times)} | {statistics.median(times):.2f} | {max(times):.2f} |"
            )
        return out


def wait_for(spark, rows_read: dict[str, int], timeout: float, failure: list) -> None:
    """Until every query named has read its expected rows in all (the wave went through both
    ingestion and the job), then a second more: the next wave lands on idle queries."""
    deadline, read = time.monotonic() + timeout, {}
    while time.monotonic() < deadline:
        if failure:  # the run failed: measure() raises its error
            return
        read = {
            q.name: sum(p.get("numInputRows", 0) for p in q.recentProgress)
            for q in spark.streams.active
        }
        if all(read.get(name, 0) >= n for name, n in rows_read.items()):
            time.sleep(1.0)
            return
        time.sleep(0.2)
    raise TimeoutError(
        f"batch-cost: queries did not read {rows_read} within {timeout:g} s "
        f"(read: {read}); raise --wave-seconds on a loaded machine"
    )


def measure(spark, base: TidemarkConfig, job: str, args) -> list[dict]:
    spec = get_job(job)
    if base.on_store:
        root = base.data_root / f"batch-cost-{job}-{uuid.uuid4().hex[:8]}"
    else:
        root = Path(tempfile.mkdtemp(prefix=f"batch-cost-{job}-", dir=args.work))
    cfg = base.with_data_root(root)
    ensure_lake(spark, cfg)
    files = {s: waves_of(s, args.waves + 1, args.events, args.seed) for s in spec.sources}
    stop = threading.Event()
    failure: list[BaseException] = []

    def host() -> None:
        try:
            run_continuous(
                spark,
                cfg,
                streams=spec.sources,
                jobs=[job],
                trigger_seconds=args.trigger_seconds,
                should_stop=stop.is_set,
                holder="the batch-cost benchmark",
                flush_seconds=5.0,
            )
        except BaseException as exc:  # noqa: BLE001 - reported below
            failure.append(exc)

    thread = threading.Thread(target=host, name=f"continuous {job}")
    thread.start()
    try:
        for wave in range(args.waves + 1):  # wave 0 warms the queries up (first plans, tables)
            if wave:
                time.sleep(args.quiet_seconds)  # a sparse stream's quiet spell, if asked
            for stream, waves in files.items():
                write_files(
                    cfg.paths.landing_dir(stream),
                    GeneratorConfig(stream=stream, seed=args.seed, file_prefix=f"wave{wave:03d}"),
                    waves,
                    only=range(wave, wave + 1),
                )
            expected = (wave + 1) * args.events
            wait_for(
                spark,
                {
                    **{query_name(s): expected for s in spec.sources},
                    job: expected * len(spec.sources),
                },
                args.warmup_seconds if wave == 0 else args.wave_seconds,
                failure,
            )
    finally:
        stop.set()
        thread.join()
    if failure:
        raise failure[0]
    progress = ops_tables.read(cfg, "stream_progress")
    warmed = set()  # queries past their first batch with input (the warm-up wave's)
    rows = []
    for row in sorted(progress, key=lambda r: (r["job"], r["batch_id"])):
        if not row["num_input_rows"]:
            continue
        if row["job"] not in warmed:
            warmed.add(row["job"])
            continue
        durations = dict(row["durations_ms"] or {})
        rows.append(
            {
                "job": job,
                "query": row["job"],
                "batch_id": row["batch_id"],
                "input_rows": row["num_input_rows"],
                "batch_ms": row["batch_duration_ms"],
                "state_commit_ms": row["state_commit_ms"],
                **{p: durations.get(p, 0) for p in PHASES},
            }
        )
    if not args.keep:
        locations.delete_tree(root)
    return rows


def table(rows: list[dict]) -> list[str]:
    out = [
        "| job | query | batches | rows a batch (median) | batch s median | batch s worst | "
        + " | ".join(f"{p} s" for p in PHASES)
        + " | state commit s |",
        "|---|---|---:|---:|---:|---:|" + "---:|" * (len(PHASES) + 1),
    ]
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        groups.setdefault((row["job"], row["query"]), []).append(row)
    for (job, query), batches in groups.items():

        def med(key: str) -> float:
            return statistics.median(b[key] or 0 for b in batches) / 1000.0

        out.append(
            f"| {job} | {query} | {len(batches)} | "
            f"{statistics.median(b['input_rows'] for b in batches):g} | "
            f"{med('batch_ms'):.2f} | {max(b['batch_ms'] for b in batches) / 1000:.2f} | "
            + " | ".join(f"{med(p):.2f}" for p in PHASES)
            + f" | {med('state_commit_ms'):.2f} |"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv  # recorded with the results
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", nargs="*", default=None, help="default: every built-in job")
    parser.add_argument("--waves", type=int, default=12)
    parser.add_argument("--events", type=int, default=5, help="events per wave per stream")
    parser.add_argument("--trigger-seconds", type=float, default=1.0)
    parser.add_argument("--wave-seconds", type=float, default=120.0)
    parser.add_argument("--warmup-seconds", type=float, default=300.0)
    parser.add_argument(
        "--quiet-seconds",
        type=float,
        default=0.0,
        help="how long the streams stay quiet before each wave after the first (a sparse "
        "stream: Spark ends Python workers idle for a minute)",
    )
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--work", default=None, help="folder for the data roots (default: tmp)")
    parser.add_argument("--keep", action="store_true", help="keep the data roots")
    parser.add_argument(
        "--store",
        action="store_true",
        help="the data roots on the project's S3 server (s3://bench/batch-cost-...)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also time each step inside the foreachBatch functions",
    )
    parser.add_argument(
        "--results",
        default=str(default_results("batch_cost.json")),
        help="where the JSON goes (default: the data root's results/; the committed evidence: results/batch_cost.json)",
    )
    args = parser.parse_args(argv)
    if args.work:
        Path(args.work).mkdir(parents=True, exist_ok=True)
    base = TidemarkConfig.from_env()
    if args.store:
        from orchestration.cli.services import start_store_if_used

        base = base.with_data_root("s3://bench/batch-cost")
        print(start_store_if_used(base), flush=True)
    spark = get_spark(base)
    jobs = args.jobs or sorted(registry())
    rows: list[dict] = []
    timer = StepTimer()
    if args.profile:
        timer.install()
    started = time.monotonic()
    for job in jobs:
        print(f"{job}: {args.waves} waves of {args.events} events per stream", flush=True)
        rows.extend(measure(spark, base, job, args))
    Path(args.results).write_text(
        json.dumps(
            {
                "command": "tools/benchmarks/batch_cost.py " + " ".join(argv),
                "machine": f"{platform.machine()}, {__import__('os').cpu_count()} cores",
                "data_roots": "s3://bench (the project's S3 server)"
                if args.store
                else "local disk",
                "seconds": round(time.monotonic() - started),
                "batches": rows,
                "steps": timer.seconds,
            },
            indent=1,
        )
    )
    # ingestion queries appear once per job that reads them; each job's own line is the job
    print("\n".join(table(rows)))
    if args.profile:
        timer.uninstall()
        print("\n".join(timer.table()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
