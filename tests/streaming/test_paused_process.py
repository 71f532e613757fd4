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
# checks for silent executors every second and gives up on one after 4 s (Spark's defaults: 60 s,
# 120 s). The executor sends a heartbeat every 0.5 s and waits that long for each answer; it ends
# its JVM after 20 failures in a row (Spark's default: 60 at 10 s). With 2 allowed, a loaded CI
# machine ended the JVM during its start, before the pause.
SHORT_TIMEOUTS = {
    "spark.network.timeout": "4s",
    "spark.network.timeoutInterval": "1s",
    "spark.executor.heartbeatInterval": "500ms",
    "spark.executor.heartbeat.maxFailures": "20",
}

PAUSES = 3
PAUSE_S = 6  # 1.5 times the timeout


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


def _sum_after(proc: subprocess.Popen, wait_s: float) -> list[str]:
    time.sleep(wait_s)
    proc.stdin.write("sum\n")
    proc.stdin.flush()
    return _answer(proc)


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
        answers = []
        # On waking, the driver's check for silent executors and the executor's heartbeat race:
        # where the heartbeat comes first, even Spark's default lets the executor live. Three
        # pauses give the check three chances to find it silent past the timeout.
        for _ in range(PAUSES):
            os.killpg(proc.pid, signal.SIGSTOP)
            time.sleep(PAUSE_S)
            os.killpg(proc.pid, signal.SIGCONT)
            answers.append(_sum_after(proc, 1.5))
        # then 3 s more: the driver's checks (every 1 s) and the executor's heartbeats (every
        # 0.5 s) have each had their many turns
        answers += [_sum_after(proc, 1.5), _sum_after(proc, 1.5)]
        assert answers == [["sum", str(sum(range(1000)))]] * (PAUSES + 2)
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    log = (tmp_path / "data" / "logs" / "spark.log").read_text()
    assert "Removing executor" not in log and "unable to send heartbeats" not in log
