"""A tidemark process on a local master survives being paused longer than Spark's network
timeout (a host or VM frozen, a laptop asleep, a long GC): its JVM carries on, where Spark's
default would drop its own executor and end the JVM once the heartbeats had failed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

# A process that starts tidemark's Spark session, then sums 0..999 each time it is told to.
WORKER = textwrap.dedent(
    """
    import sys
    from streaming_jobs.core.config import TidemarkConfig
    from streaming_jobs.storage.spark import get_spark

    spark = get_spark(TidemarkConfig.from_env())
    print("ready", spark.range(3).count(), flush=True)
    for line in sys.stdin:
        try:
            print("sum", spark.range(1000).selectExpr("sum(id)").first()[0], flush=True)
        except Exception as exc:  # the JVM gone: say so and go on reading
            print("failed", type(exc).__name__, flush=True)
    """
)

# Spark's timeouts shortened so that the pause exceeds them in seconds, not minutes: the driver
# checks for silent executors every second, gives up on one after 4 s, and the executor ends its
# JVM after 2 failed heartbeats (Spark's defaults: 60 s, 120 s, 60).
SHORT_TIMEOUTS = {
    "spark.network.timeout": "4s",
    "spark.network.timeoutInterval": "1s",
    "spark.executor.heartbeatInterval": "500ms",
    "spark.executor.heartbeat.maxFailures": "2",
}


def _answer(proc: subprocess.Popen) -> list[str]:
    """The worker's next answer; lines the JVM writes to the same output (its own warnings go
    to standard output) are passed over."""
    seen = []
    while line := proc.stdout.readline():
        words = line.split()
        if words and words[0] in ("ready", "sum", "failed"):
            return words
        seen.append(line)
    return ["ended", *seen]


def test_a_process_paused_past_the_network_timeout_runs_on(tmp_path):
    given = os.environ.get("TIDEMARK_SPARK_CONF", "")
    conf = ";".join(filter(None, (given, *(f"{k}={v}" for k, v in SHORT_TIMEOUTS.items()))))
    env = {**os.environ, "TIDEMARK_DATA_ROOT": str(tmp_path / "data"), "TIDEMARK_SPARK_CONF": conf}
    proc = subprocess.Popen(
        [sys.executable, "-c", WORKER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # the JVM is in its group: SIGSTOP reaches it too
    )
    try:
        assert _answer(proc) == ["ready", "3"]
        os.killpg(proc.pid, signal.SIGSTOP)
        time.sleep(8)  # twice the timeout
        os.killpg(proc.pid, signal.SIGCONT)
        answers = []
        # 6 s after the pause: the driver's checks (every 1 s) and the executor's heartbeats
        # (every 0.5 s, 2 failures allowed) have each had their many turns
        for _ in range(4):
            time.sleep(1.5)
            proc.stdin.write("sum\n")
            proc.stdin.flush()
            answers.append(_answer(proc))
        assert answers == [["sum", str(sum(range(1000)))]] * 4
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    log = (tmp_path / "data" / "logs" / "spark.log").read_text()
    assert "Removing executor" not in log and "unable to send heartbeats" not in log
