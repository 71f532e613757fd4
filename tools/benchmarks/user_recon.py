"""Benchmark: reconciling your own jobs, in full and after one more wave.

    .venv/bin/python tools/benchmarks/user_recon.py --events 200000 --days 3
    .venv/bin/python tools/benchmarks/user_recon.py --events 200000 --results results/user_recon.json

A stream of your own (``meters``, as ``tidemark new stream`` writes it) and three jobs over it,
as ``tidemark new job`` writes them: a SQL job of 5-minute windows, a SQL job of 10-minute
windows sliding every 5 minutes (both reconciled by day) and a Python job with keyed state and
a TTL (recomputed in full when anything new reached it). ``--events`` meter readings spread
over ``--days`` days of event time (500 devices, 1 % duplicates) land in hourly files, are
ingested and streamed by every job, then, as a schedule meets them:

1. ``tidemark-dbt build``: the first reconciliation (every job in full), timed;
2. one more hour of readings lands and is streamed;
3. ``tidemark-dbt build``: the second reconciliation (timed; each job's scope printed);
4. ``tidemark-dbt build`` once more with nothing new: every job is left out (timed).

Every dbt run is a new process, the built-in jobs out of the selection. ``--target session``
(the default): each starts a Spark of its own (its JVM start included), as ``make recon`` does
with no endpoint up; ``--target endpoint``: each uses the data root's SQL endpoint, started once
before the first (not timed), as scheduled reconciliations run under ``make dev`` and
``make live``. Writes a JSON of the figures to ``--results`` (default: under the data root,
which is kept).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

JOBS = ("meters_5m", "meters_sliding", "meter_activity")
SLIDING = """-- meters_sliding: readings per device per 10-minute window, sliding every 5 minutes.
-- source: meters
-- keys: device_id, window_start, window_end
-- measures: readings
-- watermark: 10 minutes
select device_id, window.start as window_start, window.end as window_end, count(*) as readings
from events
group by device_id, window(event_time, '10 minutes', '5 minutes')
"""


def dbt(*args: str) -> tuple[float, str]:
    started = time.monotonic()
    done = subprocess.run(
        [str(Path(sys.executable).with_name("tidemark-dbt")), *args], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"tidemark-dbt {' '.join(args)} failed:\n{done.stdout[-4000:]}")
    return time.monotonic() - started, done.stderr


def readings(start: datetime, hours: int, per_hour: int, rng: random.Random, first_id: int):
    """Per hour: that hour's readings as JSON lines (1 % of them sent twice)."""
    n = first_id
    for hour in range(hours):
        lines = []
        for _ in range(per_hour):
            at = start + timedelta(hours=hour, seconds=rng.uniform(0, 3600))
            line = json.dumps(
                {
                    "event_id": f"m{n}",
                    "device_id": f"d{rng.randrange(500)}",
                    "value": round(rng.uniform(0, 100), 3),
                    "event_time": at.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
                }
            )
            lines += [line, line] if rng.random() < 0.01 else [line]
            n += 1
        yield lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--days", type=int, default=3)
    parser.add_argument("--data-root", default=".tidemark/data/bench-user-recon")
    parser.add_argument("--results", help="where the JSON goes (default: the data root)")
    parser.add_argument("--target", choices=("session", "endpoint"), default="session")
    args = parser.parse_args(argv)

    import os
    import shutil

    root = Path(args.data_root).resolve()
    shutil.rmtree(root, ignore_errors=True)
    folder = root / "jobs"
    folder.mkdir(parents=True)
    os.environ["TIDEMARK_DATA_ROOT"] = str(root / "data")
    os.environ["TIDEMARK_JOBS_PATH"] = str(folder)
    os.environ["TIDEMARK_DBT_TARGET"] = args.target

    from orchestration.cli.scaffold import scaffold
    from streaming_jobs.core.config import TidemarkConfig
    from streaming_jobs.storage.registry import get_job
    from streaming_jobs.runtime.runner import run_bronze, run_job
    from streaming_jobs.storage.spark import get_spark

    scaffold("stream", "meters", folder=str(folder))
    scaffold("job", "meters_5m", folder=str(folder), source="meters")
    (folder / "meters_sliding.sql").write_text(SLIDING)
    scaffold("job", "meter_activity", folder=str(folder), source="meters", sql=False, keyed=True)
    cfg = TidemarkConfig.from_env()
    spark = get_spark(cfg)
    specs = [get_job(j) for j in JOBS]
    landing = cfg.paths.landing_dir("meters")
    landing.mkdir(parents=True, exist_ok=True)

    hours = args.days * 24
    rng = random.Random(7)
    start = datetime(2026, 1, 1)
    waves = list(readings(start, hours + 1, args.events // hours, rng, 0))

    def stream(hour_files) -> float:
        t0 = time.monotonic()
        for hour, lines in hour_files:
            (landing / f"h{hour:04d}.jsonl").write_text("\n".join(lines) + "\n")
        run_bronze(spark, cfg, "meters")
        for spec in specs:
            run_job(spark, cfg, spec)
        return time.monotonic() - t0

    streamed_s = stream(list(enumerate(waves[:hours])))
    spark.stop()  # dbt runs in a Spark of its own: a new one per run, or the endpoint
    if args.target == "endpoint":
        from streaming_jobs.services import sql_endpoint

        started = time.monotonic()
        sql_endpoint.start(cfg)
        endpoint_start_s = time.monotonic() - started
    select = (
        "build",
        "--exclude-resource-type",
        "unit_test",
        "--select",
        *(f"+recon_{j}" for j in JOBS),
        "+int_late_events",
        "recon_positions",
    )

    def nodes() -> dict:
        """What dbt's run spent its time on (its run_results.json): the sum over nodes, their
        count, and the slowest eight."""
        results = json.loads((cfg.paths.dbt / "target" / "run_results.json").read_text())
        timed = sorted(
            ((r["unique_id"].split(".", 2)[-1], r["execution_time"]) for r in results["results"]),
            key=lambda item: -item[1],
        )
        return {
            "nodes": len(timed),
            "nodes_seconds": round(sum(t for _, t in timed), 1),
            "dbt_elapsed_seconds": round(results["elapsed_time"], 1),
            "slowest": {name: round(t, 1) for name, t in timed[:8]},
        }

    first_s, first_scope = dbt(*select)
    first_nodes = nodes()
    spark = get_spark(cfg)
    wave_s = stream([(hours, waves[hours])])
    spark.stop()
    second_s, second_scope = dbt(*select)
    second_nodes = nodes()
    quiet_s, quiet_scope = dbt(*select)
    quiet_nodes = nodes()

    def scope(text: str) -> dict:
        return {
            line.split(": ", 2)[1]: line.split(": ", 2)[2]
            for line in text.splitlines()
            if line.startswith("tidemark-dbt: ") and line.split(": ", 2)[1] in JOBS
        }

    events = sum(len(w) for w in waves)
    figures = {
        "date": datetime.now().strftime("%Y-%m-%d"),
        "command": "tools/benchmarks/user_recon.py " + " ".join(argv or sys.argv[1:]),
        "events": events,
        "days": args.days,
        "jobs": list(JOBS),
        "target": args.target,
        "endpoint_start_seconds": round(endpoint_start_s, 1) if args.target == "endpoint" else None,
        "streamed_seconds": round(streamed_s, 1),
        "wave_streamed_seconds": round(wave_s, 1),
        "first_reconciliation_seconds": round(first_s, 1),
        "second_reconciliation_seconds": round(second_s, 1),
        "nothing_new_reconciliation_seconds": round(quiet_s, 1),
        "first_scope": scope(first_scope),
        "second_scope": scope(second_scope),
        "nothing_new_scope": scope(quiet_scope),
        "first_nodes": first_nodes,
        "second_nodes": second_nodes,
        "nothing_new_nodes": quiet_nodes,
    }
    if args.target == "endpoint":
        sql_endpoint.stop(cfg)
    out = Path(args.results) if args.results else root / "user_recon.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))
    print(
        f"| {events:,} events, {args.days} days, 3 jobs, {args.target} | first {first_s:.1f} s | after one "
        f"more hour {second_s:.1f} s ({second_s / first_s:.0%}) | nothing new {quiet_s:.1f} s |"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
