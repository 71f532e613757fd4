"""`tidemark run` with the data root on the project's S3-compatible server, as a user starts it:
the waves stream through Dagster, dbt reconciles with its warehouse on the store, and the
summary says every stream balanced and 0 unexplained; this machine's disk keeps only its
working state."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from streaming_jobs.core import locations
from streaming_jobs.core.config import TidemarkConfig


@pytest.mark.long  # about 6 minutes here: make test-long
@pytest.mark.slow
@pytest.mark.own_sql  # dbt in the run's own session: it reaches the store as the run does
def test_tidemark_run_on_the_store_balances_and_reconciles(s3_server, tmp_path):
    _, s3_cfg = s3_server
    root = f"s3://run-{uuid.uuid4().hex[:8]}/root"  # the run makes its bucket
    env = {
        **os.environ,
        "TIDEMARK_DATA_ROOT": root,
        "TIDEMARK_WORK_DIR": str(tmp_path / "work"),
        "TIDEMARK_S3_HOME": str(s3_cfg.s3.home),
        "TIDEMARK_S3_PORT": str(s3_cfg.s3.port),
    }
    done = subprocess.run(
        [str(Path(sys.executable).with_name("tidemark")), "run", "--fresh", "--events", "3000"],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-4000:]
    assert "reconciliation: " in said and " 0 unexplained" in said, said[-3000:]
    for stream in ("transactions", "rides", "orders", "payments", "clicks"):
        line = next(ln for ln in said.splitlines() if ln.strip().startswith(f"{stream}:"))
        assert "(holds)" in line, line
    cfg = TidemarkConfig.from_env(env)
    assert locations.is_delta_table(cfg.paths.dbt_table("recon", "recon_summary"))
    assert sorted(p.name for p in (tmp_path / "work").iterdir()) == [
        "dagster_home",
        "dbt",
        "logs",
    ]
