"""Nothing tidemark's Spark starts listens beyond 127.0.0.1, the Spark UI included."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

PROBE = """
import os, sys, time
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.storage.spark import get_spark
spark = get_spark(TidemarkConfig.from_env())
pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
print("CONF", spark.conf.get("spark.tidemark.probe.credential"), flush=True)
print("PID", pid, spark.sparkContext.uiWebUrl, spark.sparkContext.applicationId, flush=True)
sys.stdin.readline()  # hold the session until the test has looked
"""


def listening(pid: int) -> list[str]:
    """The local addresses of the TCP sockets process ``pid`` listens on (from /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    out = []
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                continue
            raw = bytes.fromhex(fields[1].split(":")[0])
            # /proc prints each 32-bit word in host (little-endian) order
            raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            out.append(socket.inet_ntop(family, raw))
    return out


SECRET = "s3cr3t-value=with;chars"


@pytest.mark.slow
def test_spark_with_its_ui_on_listens_on_loopback_only_and_hides_spark_conf_values(cfg):
    env = {
        **os.environ,
        "TIDEMARK_SPARK_UI": "1",
        "TIDEMARK_DATA_ROOT": str(cfg.data_root),
        "TIDEMARK_SPARK_CONF": f"spark.tidemark.probe.credential={SECRET.replace(';', '%3B')}",
    }
    env.pop("SPARK_LOCAL_IP", None)
    probe = subprocess.Popen(
        [sys.executable, "-c", PROBE],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        deadline = time.monotonic() + 300
        line, lines = "", []
        while not line.startswith("PID") and time.monotonic() < deadline:
            line = probe.stdout.readline()
            lines.append(line)
            assert line or probe.poll() is None, "the probe's Spark did not start"
        _, pid, ui, app = line.split()
        # the setting reached the session, and neither the JVM's command line nor the UI shows it
        assert f"CONF {SECRET.replace(';', '%3B')}\n" in lines
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode()
        assert "spark.tidemark.probe.credential" not in cmdline and "s3cr3t" not in cmdline
        assert "--properties-file" in cmdline
        environment = requests.get(f"{ui}/api/v1/applications/{app}/environment", timeout=30).json()
        shown = dict(environment["sparkProperties"])
        assert "s3cr3t" not in str(environment)
        assert shown["spark.tidemark.probe.credential"].startswith("*********")
        addresses = listening(int(pid))
        assert ui.startswith("http://127.0.0.1:")  # the UI is on
        assert addresses, "the JVM listens on nothing: the probe is wrong"
        assert set(addresses) <= {"127.0.0.1", "::1", "::ffff:127.0.0.1"}, addresses
    finally:
        probe.stdin.write("\n")
        probe.stdin.flush()
        probe.wait(timeout=120)
