"""Benchmark: what always-on costs: sensor ticks, and a scheduled reconciliation's wall time.

    make bench-live                              # 2,000,000 events
    .venv/bin/python tools/benchmarks/always_on.py --events 10000000 --keep
    .venv/bin/python tools/benchmarks/always_on.py --data-root <kept root>   # measure again

1. A data root: ``--events`` events over the five demo streams, landed in waves, ingested and
   streamed by every job (as `tidemark run` does), or ``--data-root`` to reuse one.
2. Reconciliation, as the schedule runs it: ``reconciliation_job`` launched through the
   webserver of a real ``dagster dev`` (run queue, run worker process), timed from the run's
   start to its end (Dagster's own run stats):
   - ``session``: ``TIDEMARK_DBT_TARGET=session``, dbt starts Spark in the run's dbt process
     (a new JVM per run: what every scheduled reconciliation paid before the endpoint);
   - ``endpoint``: through the SQL endpoint, after one warm-up run (a long-running
     deployment's endpoint is warm).
3. Sensor ticks: the daemon's ticks of ``checkpoint_health_sensor`` and
   ``state_size_sensor`` on that instance (the first after start, then steady), read from
   the instance. With ``--baseline REV`` (default d933b44, the last commit whose sensors
   started a SparkSession), the same sensors of that revision are evaluated in a fresh process
   on the same data root (first and second evaluation), for comparison.

It prints markdown tables (paste them into docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(CHECKOUT / "tools" / "benchmarks"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_root(root: Path, events: int, waves: int, seed: int) -> dict:
    from reconciliation import land_and_stream

    from streaming_jobs.core.config import TidemarkConfig
    from streaming_jobs.storage.spark import get_spark

    cfg = TidemarkConfig.from_env().with_data_root(root)
    spark = get_spark(cfg)
    times = land_and_stream(spark, cfg, events, waves, seed)
    spark.stop()
    return times


def run_seconds(root: Path, run_id: str) -> float:
    from dagster import DagsterInstance

    os.environ["DAGSTER_HOME"] = str(root / "dagster_home")
    instance = DagsterInstance.get()
    stats = instance.get_run_stats(run_id)
    return stats.end_time - stats.start_time


def reconcile(cfg, gql, root: Path, label: str, repeat: int) -> list[dict]:
    from orchestration.recon.recon_partitions import incremental_tags

    out = []
    for attempt in range(repeat):
        run_id = gql.launch("reconciliation_job", tags=incremental_tags(cfg))
        status = gql.wait(run_id, timeout=3600)
        seconds = run_seconds(root, run_id)
        out.append(
            {"mode": label, "attempt": attempt + 1, "status": status, "seconds": round(seconds, 1)}
        )
        print(f"  reconciliation ({label}) {attempt + 1}: {status} in {seconds:.1f}s", flush=True)
    return out


def sensor_ticks(root: Path) -> dict[str, list[float]]:
    from dagster import DagsterInstance
    from dagster._core.scheduler.instigation import InstigatorType

    os.environ["DAGSTER_HOME"] = str(root / "dagster_home")
    instance = DagsterInstance.get()
    out = {}
    for state in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR):
        ticks = instance.get_ticks(state.instigator_origin_id, state.selector_id, limit=1000)
        out[state.instigator_name] = [
            round(t.end_timestamp - t.timestamp, 2) for t in reversed(ticks) if t.end_timestamp
        ]
    return out


BASELINE_PROBE = """
import json, sys, time
from dagster import build_sensor_context, DagsterInstance
started = time.monotonic()
from orchestration.defs.ops.sensors import checkpoint_health_sensor, state_size_sensor
imported = time.monotonic() - started
out = {"import": round(imported, 2)}
for sensor in (checkpoint_health_sensor, state_size_sensor):
    times = []
    for _ in range(2):
        t0 = time.monotonic()
        sensor(build_sensor_context(instance=DagsterInstance.ephemeral()))
        times.append(round(time.monotonic() - t0, 2))
    out[sensor.name] = times
print("PROBE " + json.dumps(out))
"""


def baseline_sensors(root: Path, revision: str) -> dict:
    """The revision's sensors, evaluated in a fresh process on ``root``."""
    work = Path(tempfile.mkdtemp(prefix="tidemark-baseline-"))
    subprocess.run(
        ["git", "-C", str(CHECKOUT), "worktree", "add", "--detach", str(work), revision],
        check=True,
        capture_output=True,
    )
    try:
        env = {**os.environ, "TIDEMARK_DATA_ROOT": str(root), "PYTHONPATH": str(work)}
        result = subprocess.run(
            [sys.executable, "-c", BASELINE_PROBE],
            env=env,
            cwd=work,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        line = next((s for s in result.stdout.splitlines() if s.startswith("PROBE ")), None)
        if line is None:
            return {"error": (result.stdout + result.stderr)[-1500:]}
        return json.loads(line.removeprefix("PROBE "))
    finally:
        subprocess.run(
            ["git", "-C", str(CHECKOUT), "worktree", "remove", "--force", str(work)],
            capture_output=True,
        )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--waves", type=int, default=4)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--data-root", type=Path)
    parser.add_argument("--keep", action="store_true", help="keep the data root it built")
    parser.add_argument(
        "--baseline",
        default="d933b44",
        help="revision whose sensors to evaluate for comparison ('' to skip)",
    )
    args = parser.parse_args(argv)

    root = (args.data_root or Path(tempfile.mkdtemp(prefix="tidemark-bench-live-"))).resolve()
    os.environ["TIDEMARK_DATA_ROOT"] = str(root)
    os.environ["TIDEMARK_SQL_PORT"] = str(free_port())
    setup = {}
    if args.data_root is None:
        print(f"building {root} with {args.events:,} events", flush=True)
        setup = build_root(root, args.events, args.waves, args.seed)
    from streaming_jobs.core.config import TidemarkConfig

    from orchestration.cli.live import DagsterDev
    from orchestration.cli.services import start_sql_endpoint, stop_sql_endpoint

    cfg = TidemarkConfig.from_env().with_data_root(root)
    results = []
    # 1. today's path: a JVM per reconciliation run
    dagster = DagsterDev(
        cfg, free_port(), env={"TIDEMARK_DBT_TARGET": "session", "TIDEMARK_RECON_CRON": "0 0 1 1 *"}
    )
    started = time.monotonic()
    gql = dagster.start()
    print(f"dagster dev up in {time.monotonic() - started:.0f}s", flush=True)
    try:
        results += reconcile(cfg, gql, root, "session (JVM per run)", args.repeat)
    finally:
        dagster.stop()
    # 2. the SQL endpoint: one warm-up run, then timed ones
    endpoint_started = time.monotonic()
    start_sql_endpoint(cfg)
    endpoint_seconds = time.monotonic() - endpoint_started
    dagster = DagsterDev(
        cfg,
        free_port(),
        env={"TIDEMARK_DBT_TARGET": "endpoint", "TIDEMARK_RECON_CRON": "0 0 1 1 *"},
    )
    gql = dagster.start()
    try:
        warm = reconcile(cfg, gql, root, "endpoint, first run after start", 1)
        results += warm + reconcile(cfg, gql, root, "endpoint, warm", args.repeat)
        time.sleep(150)  # a few more sensor ticks
    finally:
        dagster.stop()
        stop_sql_endpoint(cfg)
    ticks = sensor_ticks(root)
    baseline = baseline_sensors(root, args.baseline) if args.baseline else {}

    print("\n## Scheduled reconciliation (run start to end, Dagster run stats)\n")
    print(
        f"{args.events:,} events ({root}); {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}; setup {json.dumps({k: round(v) for k, v in setup.items()})}; "
        f"SQL endpoint start {endpoint_seconds:.0f}s\n"
    )
    print("| mode | run | status | seconds |\n|---|---:|---|---:|")
    for r in results:
        print(f"| {r['mode']} | {r['attempt']} | {r['status']} | {r['seconds']} |")
    print("\n## Sensor ticks (seconds per tick, from the daemon)\n")
    print("| sensor | ticks | first | steady median | steady max |\n|---|---:|---:|---:|---:|")
    for name in ("checkpoint_health_sensor", "state_size_sensor"):
        times = ticks.get(name, [])
        if times:
            steady = times[1:] or times
            print(
                f"| {name} | {len(times)} | {times[0]} | {statistics.median(steady)} | "
                f"{max(steady)} |"
            )
    if baseline:
        print(
            f"\nBaseline {args.baseline} (sensors that start a SparkSession), fresh process, "
            f"same data root: {json.dumps(baseline)}"
        )
    if not args.keep and args.data_root is None:
        import shutil

        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
