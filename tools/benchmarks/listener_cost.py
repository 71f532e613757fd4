"""Benchmark: what the progress listener costs per progress event, PySpark's way and tidemark's.

    .venv/bin/python tools/benchmarks/listener_cost.py                 # 40 s, about 40 events
    .venv/bin/python tools/benchmarks/listener_cost.py --seconds 120 --results results/listener-cost.json

Every batch of every query sends the driver's listeners one progress event. PySpark's
listener turns it into Python objects before any listener sees it: a call into the JVM per
field, per map entry and per source, and for each observed metric a class looked up by name on
the whole class path. tidemark's listener (`streaming_jobs.runtime.progress._SparkEvents`) asks
for the progress as Spark's JSON, one call. Both run here on the same events, in one
SparkSession with tidemark's settings and class path: a windowed count over Spark's rate source
with three observed metrics (as a job with expectations has), one batch a second. Both
conversions run on the listener's thread, which serves every query of the process in turn.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import statistics
import tempfile
import time

from pyspark.sql import functions as F


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=40.0, help="how long the query runs")
    parser.add_argument("--results", help="the JSON file to write (default: the data root's)")
    args = parser.parse_args(argv)

    from py4j.java_gateway import java_import
    from pyspark import SparkContext
    from pyspark.java_gateway import ensure_callback_server_started
    from pyspark.sql.streaming.listener import QueryProgressEvent

    from streaming_jobs.core.config import TidemarkConfig, default_results
    from streaming_jobs.storage.spark import get_spark

    spark = get_spark(TidemarkConfig.from_env())
    pyspark_ms: list[float] = []
    tidemark_ms: list[float] = []

    class Timed:
        """Both conversions of each progress event, timed."""

        def onQueryProgress(self, jevent) -> None:  # noqa: N802 - Spark's names
            started = time.perf_counter()
            QueryProgressEvent.fromJObject(jevent).progress.json  # noqa: B018 - timed
            pyspark_ms.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            json.loads(jevent.progress().json())
            tidemark_ms.append((time.perf_counter() - started) * 1000)

        def onQueryStarted(self, jevent) -> None:  # noqa: N802
            pass

        def onQueryIdle(self, jevent) -> None:  # noqa: N802
            pass

        def onQueryTerminated(self, jevent) -> None:  # noqa: N802
            pass

        class Java:
            implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]

    gateway = SparkContext._gateway
    java_import(gateway.jvm, "org.apache.spark.sql.streaming.*")
    ensure_callback_server_started(gateway)
    spark.streams._jsqm.addListener(gateway.jvm.PythonStreamingQueryListenerWrapper(Timed()))
    counts = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 50)
        .load()
        .withWatermark("timestamp", "5 seconds")
        .groupBy(F.window("timestamp", "2 seconds"))
        .count()
        .observe("counts", F.count(F.lit(1)).alias("n"), F.max("count"), F.min("count"))
    )
    query = (
        counts.writeStream.format("noop")
        .outputMode("update")
        .option("checkpointLocation", tempfile.mkdtemp(prefix="listener-cost-"))
        .trigger(processingTime="1 second")
        .start()
    )
    time.sleep(args.seconds)
    query.stop()
    time.sleep(2)  # the last events reach the listener
    if not pyspark_ms:
        print("no progress event reached the listener: nothing measured")
        return 1
    result = {
        "measured": dt.date.today().isoformat(),
        "command": " ".join(["tools/benchmarks/listener_cost.py", *sys.argv[1:]]),
        "events": len(pyspark_ms),
        "pyspark_ms_median": statistics.median(pyspark_ms),
        "pyspark_ms_max": max(pyspark_ms),
        "tidemark_ms_median": statistics.median(tidemark_ms),
        "tidemark_ms_max": max(tidemark_ms),
    }
    print("| listener | per progress event, median ms | max ms |\n|---|---:|---:|")
    print(f"| PySpark's conversion | {result['pyspark_ms_median']:.1f} | {max(pyspark_ms):.1f} |")
    print(
        f"| tidemark's (the JSON) | {result['tidemark_ms_median']:.1f} | {max(tidemark_ms):.1f} |"
    )
    print(f"over {len(pyspark_ms)} progress events")
    out = args.results or default_results("listener-cost.json")
    with open(out, "w") as fh:
        json.dump(result, fh, indent=1)
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
