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


def _local_run(spark, tmp_path) -> TidemarkConfig:
    """The jobs in local mode (this session's Spark) on a data root of their own."""
    local = TidemarkConfig.from_env({"TIDEMARK_DATA_ROOT": str(tmp_path / "local")})
    land(local.data_root)
    for stream in sorted(set(JOBS.values())):
        run_bronze(spark, local, stream)
    for job in JOBS:
        run_job(spark, local, get_job(job))
    return local


def gold_rows(root, job: str) -> Counter:
    """Every gold row, floats rounded (a sum may add in another order on other executors);
    ``root`` a local data root or a place on the store."""
    from streaming_jobs.core import locations

    rows = locations.delta_table(root / "lake" / "gold" / job).to_pyarrow_table().to_pylist()
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
    local = _local_run(spark, tmp_path)

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


ON_STORE = """
import sys
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.runtime.runner import run_bronze, run_job
from streaming_jobs.storage.registry import get_job
from streaming_jobs.storage.spark import get_spark

cfg = TidemarkConfig.from_env()
spark = get_spark(cfg)
jobs = dict(pair.split("=") for pair in sys.argv[1:])
for stream in sorted(set(jobs.values())):
    run_bronze(spark, cfg, stream)
for job in jobs:
    run_job(spark, cfg, get_job(job))
print("executors", spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1)
"""


@pytest.mark.long
@pytest.mark.slow
def test_jobs_on_a_cluster_with_the_data_root_on_the_store_give_the_local_rows(
    spark, spark_cluster, s3_bucket, tmp_path
):
    """No shared disk: the driver (a process of its own) and the cluster's executors reach the
    landing files, the tables and the checkpoints only through the object store."""
    _, s3_cfg, _, bucket = s3_bucket
    local = _local_run(spark, tmp_path)

    store = s3_cfg.with_data_root(f"s3://{bucket}/cluster")
    for stream in sorted(set(JOBS.values())):
        gen = GeneratorConfig(stream=stream, events=3000, files=3, seed=17)
        write_files(store.paths.landing_dir(stream), gen, generate(gen))
    work = tmp_path / "driver-work"
    events = tmp_path / "store-events"  # the driver's own log, on its own disk
    events.mkdir()
    env = {
        **os.environ,
        "TIDEMARK_DATA_ROOT": str(store.data_root),
        "TIDEMARK_WORK_DIR": str(work),
        "TIDEMARK_S3_HOME": str(s3_cfg.s3.home),
        "TIDEMARK_S3_PORT": str(s3_cfg.s3.port),
        "TIDEMARK_SPARK_MASTER": spark_cluster.master,
        "TIDEMARK_SPARK_CONF": f"spark.eventLog.enabled=true;spark.eventLog.dir={events};"
        "spark.eventLog.compress=false;spark.eventLog.rolling.enabled=false",
    }
    done = subprocess.run(
        [sys.executable, "-c", ON_STORE, *(f"{job}={stream}" for job, stream in JOBS.items())],
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "executors 2" in done.stdout

    for job in JOBS:
        want = gold_rows(local.data_root, job)
        assert want and gold_rows(store.data_root, job) == want, job
    assert set(stateful_tasks(events).values()) == {"0", "1"}  # state on both executors
    # the driver's disk holds its working state only: no lake, no checkpoint, no landing
    assert not any((work / part).exists() for part in ("lake", "checkpoints", "landing"))
