"""Benchmark: how long a continuous run hosting every job takes to stop once asked, mid catch-up.

    .venv/bin/python tools/benchmarks/stop_time.py --events 150000 --after 60

A continuous run stops each query between two batches (`operations.continuous`): a query that
is behind is stopped once its batch in flight has reported. A run ends so when asked (Ctrl-C,
a Dagster termination, ``tidemark live``'s end) and when one of its queries fails; a recovery
run queued behind it on a checkpoint's tag waits as long. On a data root of its own, in one
SparkSession (``local[2]``): ``--events`` events per stream landed (the generator's, in four
files), then `run_continuous` hosting every stream and job on live's 15 s trigger, asked to stop
``--after`` seconds after it began, while the queries are in their catch-up batches; the
seconds from the ask to its return. Compare two versions of the code by running each in its
own checkout, alternated, in one sitting.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import tempfile
import time
from pathlib import Path

from streaming_jobs.core.config import TidemarkConfig, default_results
from streaming_jobs.operations.continuous import run_continuous
from streaming_jobs.runtime.tables import ensure_lake
from streaming_jobs.storage.generator import GeneratorConfig, generate, write_files
from streaming_jobs.storage.registry import registry, streams
from streaming_jobs.storage.spark import get_spark


def measure(events: int, after: float, work: str | None) -> dict:
    root = Path(tempfile.mkdtemp(prefix="stop-time-", dir=work))
    cfg = TidemarkConfig.from_env().with_data_root(root)
    spark = get_spark(cfg)
    ensure_lake(spark, cfg)
    for stream in streams():
        gen = GeneratorConfig(stream=stream, events=events, files=4, seed=7)
        write_files(cfg.paths.landing_dir(stream), gen, generate(gen))
    asked: list[float] = []
    began = time.monotonic()

    def should_stop() -> bool:
        if time.monotonic() - began < after:
            return False
        if not asked:
            asked.append(time.monotonic())
        return True

    out = run_continuous(
        spark,
        cfg,
        streams=list(streams()),
        jobs=list(registry()),
        trigger_seconds=15,
        should_stop=should_stop,
        flush_seconds=10,
    )
    stop_seconds = time.monotonic() - asked[0]
    shutil.rmtree(root, ignore_errors=True)
    return {
        "events_per_stream": events,
        "asked_after_seconds": after,
        "stop_seconds": round(stop_seconds, 1),
        "stopped_by": out.stopped_by,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=150_000, help="events landed per stream")
    parser.add_argument("--after", type=float, default=60.0, help="seconds before the stop")
    parser.add_argument("--work", default=None, help="folder for the data root (default: tmp)")
    parser.add_argument(
        "--results",
        default=None,
        help="JSON to write (default: the data root's results/stop_time.json)",
    )
    args = parser.parse_args()
    found = measure(args.events, args.after, args.work)
    print(json.dumps(found))
    target = Path(args.results) if args.results else default_results("stop_time.json")
    found |= {"machine": platform.platform(), "command": "tools/benchmarks/stop_time.py"}
    target.write_text(json.dumps(found, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
