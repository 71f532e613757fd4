"""`tidemark live` with the data root on the project's S3-compatible server, as a user starts it
(`make live`): Dagster's daemon runs the continuous run, the scheduled reconciliations and
savepoints and the sensors against the store; the command stops cleanly and its summary says
every stream balanced and 0 unexplained."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from streaming_jobs.core import locations
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.services.processes import free_port


@pytest.mark.long  # about 8.5 minutes here: make test-long
@pytest.mark.slow
@pytest.mark.own_sql  # live starts the data root's own endpoint (dbt through it, on the store)
def test_tidemark_live_on_the_store_takes_savepoints_and_reconciles(s3_server, tmp_path):
    _, s3_cfg = s3_server
    root = f"s3://live-{uuid.uuid4().hex[:8]}/root"  # live makes its bucket
    env = {
        **os.environ,
        "TIDEMARK_DATA_ROOT": root,
        "TIDEMARK_WORK_DIR": str(tmp_path / "work"),
        "TIDEMARK_S3_HOME": str(s3_cfg.s3.home),
        "TIDEMARK_S3_PORT": str(s3_cfg.s3.port),
        "TIDEMARK_SQL_PORT": str(free_port()),
    }
    tidemark = str(Path(sys.executable).with_name("tidemark"))
    # savepoints every 3 minutes (live's schedule for a reconciliation every 2): 4 minutes
    # cross at least one
    done = subprocess.run(
        [tidemark, "live", "--fresh", "--minutes", "4", "--rate", "10", "--port", str(free_port())],
        env=env,
        capture_output=True,
        text=True,
        timeout=2400,
    )
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-5000:]
    assert f"data              {root} on the project's S3 server" in said, said[:2000]
    assert "every query caught up: yes" in said, said[-4000:]
    final = next(ln for ln in said.splitlines() if "final reconciliation" in ln)
    assert final.endswith("SUCCESS"), final
    assert "reconciliation: " in said and " 0 unexplained" in said, said[-3000:]
    for stream in ("transactions", "rides", "orders", "payments", "clicks"):
        line = next(ln for ln in said.splitlines() if ln.strip().startswith(f"{stream}:"))
        assert "(holds)" in line, line
    cfg = TidemarkConfig.from_env(env)
    # the scheduled savepoint runs took savepoints on the store, each complete (its manifest)
    from streaming_jobs.operations.savepoints import savepoints

    taken = {job: savepoints(cfg, job) for job in ("events_by_type", "zone_revenue_hourly")}
    assert all(taken.values()), taken
    assert locations.is_delta_table(cfg.paths.dbt_table("recon", "recon_summary"))
    # this machine's disk holds working state only: no lake, checkpoint or landing file
    local = sorted(p.name for p in (tmp_path / "work").iterdir())
    assert local == ["dagster_home", "dbt", "logs"], local
