"""The same jobs on a Spark standalone cluster (the project's own: a master and two workers on
127.0.0.1): a windowed job and a keyed-state job materialized through Dagster by
``tidemark materialize`` with ``TIDEMARK_SPARK_MASTER`` pointing at the cluster give exactly the
rows they give in local mode, and the state partitions ran on both executors (read from Spark's
event log: every task of a stateful stage, with its executor)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.storage.generator import GeneratorConfig, generate, write_files
from streaming_jobs.storage.registry import get_job
from streaming_jobs.runtime.runner import run_bronze, run_job

JOBS = {"zone_revenue_hourly": "rides", "user_activity_profile": "clicks"}


def land(root: Path) -> None:
    for stream in sorted(set(JOBS.values())):
        gen = GeneratorConfig(stream=stream, events=3000, files=3, seed=17)
        write_files(root / "landing" / stream, gen, generate(gen))


def gold_rows(root: Path, job: str) -> Counter:
    """Every gold row, floats rounded (a sum may add in another order on other executors)."""
    from deltalake import DeltaTable

    rows = DeltaTable(str(root / "lake" / "gold" / job)).to_pyarrow_table().to_pylist()
    return Counter(
        tuple(sorted((k, round(v, 6) if isinstance(v, float) else str(v)) for k, v in r.items()))
        for r in rows
    )


def stateful_tasks(events: Path) -> dict[tuple[int, int], str]:
    """(stage, partition) -> executor id of every finished task that updated a state store,
    from the Spark event log (tasks carry their SQL metrics as named accumulables)."""
    placed = {}
    for log in events.rglob("*"):
        if not log.is_file() or log.name.startswith((".", "appstatus")):
            continue
        for line in log.read_text().splitlines():
            event = json.loads(line)
            if event.get("Event") != "SparkListenerTaskEnd":
                continue
            info = event["Task Info"]
            names = {a.get("Name") or "" for a in info.get("Accumulables", [])}
            if any("state rows" in name for name in names):
                placed[(event["Stage ID"], info["Index"])] = info["Executor ID"]
    return placed


@pytest.mark.long
@pytest.mark.slow
def test_jobs_on_a_cluster_give_the_local_rows_with_state_on_both_executors(
    spark, spark_cluster, tmp_path
):
    local = TidemarkConfig.from_env({"TIDEMARK_DATA_ROOT": str(tmp_path / "local")})
    land(local.data_root)
    for stream in sorted(set(JOBS.values())):
        run_bronze(spark, local, stream)
    for job in JOBS:
        run_job(spark, local, get_job(job))

    root = tmp_path / "cluster"
    land(root)
    events = root / "spark-events"
    events.mkdir(parents=True)
    env = {
        **os.environ,
        "TIDEMARK_DATA_ROOT": str(root),
        "TIDEMARK_SPARK_MASTER": spark_cluster.master,
        "TIDEMARK_SPARK_CONF": f"spark.eventLog.enabled=true;spark.eventLog.dir={events};"
        "spark.eventLog.compress=false;"
        "spark.eventLog.rolling.enabled=false",
    }
    select = " or ".join(f'+key:"gold/{job}"' for job in JOBS)
    done = subprocess.run(
        [str(Path(sys.executable).with_name("tidemark")), "materialize", "--select", select],
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    for job in JOBS:
        want = gold_rows(local.data_root, job)
        assert want, f"{job}: the local run wrote no rows"
        assert gold_rows(root, job) == want, job

    placed = stateful_tasks(events)
    assert placed, "no stateful task in the event log"
    # the application had two executors, one per worker, and the state stores ran on both
    assert set(placed.values()) == {"0", "1"}, placed
