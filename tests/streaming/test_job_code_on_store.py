"""`tidemark code JOB` with the data root on the project's S3-compatible server, as a user
runs it: the checkpoint's version record (and its copy of the job's file) is an object on the
store, the command reads it there, shows the diff and puts the file back. No Spark: the record
is written as a run writes it before its first batch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from helpers import windowed_counts_job
from streaming_jobs.core import locations
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.core.versions import RECORD, read_record, write_record
from streaming_jobs.operations.rebuild import code_against_checkpoint
from streaming_jobs.runtime.changes import new_record
from streaming_jobs.storage.registry import get_job

JOB = "store_counts"


def test_the_code_kept_on_the_store_is_shown_and_put_back(s3_bucket, tmp_path, monkeypatch):
    _, s3_cfg, _, bucket = s3_bucket
    folder = tmp_path / "jobs"
    folder.mkdir()
    path = folder / f"{JOB}.sql"
    path.write_text(windowed_counts_job(JOB, 10))
    env = {
        **os.environ,
        "TIDEMARK_JOBS_PATH": str(folder),
        "TIDEMARK_DATA_ROOT": f"s3://{bucket}/root",
        "TIDEMARK_WORK_DIR": str(tmp_path / "work"),
        "TIDEMARK_S3_HOME": str(s3_cfg.s3.home),
        "TIDEMARK_S3_PORT": str(s3_cfg.s3.port),
    }
    for name in ("TIDEMARK_JOBS_PATH", "TIDEMARK_DATA_ROOT"):
        monkeypatch.setenv(name, env[name])
    cfg = TidemarkConfig.from_env(env)
    checkpoint = cfg.paths.checkpoint(JOB)
    assert checkpoint.on_store
    first = new_record(get_job(JOB), frame=None)
    write_record(checkpoint, first)
    assert locations.is_file(checkpoint / RECORD)  # an object in the bucket, not a local file
    assert not (tmp_path / "work" / "checkpoints").exists()
    path.write_text(windowed_counts_job(JOB, 15))

    def tidemark(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(Path(sys.executable).with_name("tidemark")), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    shown = tidemark("code", JOB)
    assert shown.returncode == 1, shown.stdout + shown.stderr
    assert f"its checkpoint holds version {first['version']}" in shown.stdout
    assert "+group by merchant, window(event_time, '10 minutes')" in shown.stdout

    put = tidemark("code", JOB, "--put-back")
    assert put.returncode == 0, put.stdout + put.stderr
    assert path.read_text() == windowed_counts_job(JOB, 10)
    assert f"written as version {first['version']} had it" in put.stdout
    assert code_against_checkpoint(cfg, get_job(JOB)).same
    assert read_record(checkpoint)["source"]["text"] == windowed_counts_job(JOB, 10)
