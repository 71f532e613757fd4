"""`tidemark code JOB`: a job's file against the copy its checkpoint's version record keeps,
and that copy written back (after a rollback, or a change the check refused). No Spark: the
record is written as a run writes it before its first batch, and whether the job is that
version again is read by a new process."""

from __future__ import annotations

import argparse
import json

import pytest

from helpers import windowed_counts_job
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.core.versions import read_record, version_of, write_record
from streaming_jobs.operations.rebuild import CodeNotKept, put_code_back
from streaming_jobs.runtime.changes import new_record
from streaming_jobs.storage.registry import get_job

from orchestration.cli import operate

JOB = "merchant_counts"


@pytest.fixture
def job(tmp_path, monkeypatch):
    """A SQL job in a folder of the user's, its checkpoint recording version 1 (10 minutes)
    as a run records it; then the file edited to 15 minutes."""
    folder = tmp_path / "jobs"
    folder.mkdir()
    monkeypatch.setenv("TIDEMARK_JOBS_PATH", str(folder))
    path = folder / f"{JOB}.sql"
    path.write_text(windowed_counts_job(JOB, 10))
    cfg = TidemarkConfig.from_env().with_data_root(tmp_path / "root")
    first = new_record(get_job(JOB), frame=None)  # no plan: its shape is said unreadable
    write_record(cfg.paths.checkpoint(JOB), first)
    path.write_text(windowed_counts_job(JOB, 15))
    return cfg, path, first


def code(cfg, put_back: bool = False) -> int:
    return operate.code(cfg, argparse.Namespace(job=JOB, put_back=put_back))


def test_the_checkpoints_copy_is_shown_as_a_diff_and_put_back(job, capsys):
    cfg, path, first = job
    assert first["source"] == {"file": str(path), "text": windowed_counts_job(JOB, 10)}
    assert code(cfg) == 1
    said = capsys.readouterr().out
    assert f"its checkpoint holds version {first['version']}; what differs: code: query" in said
    assert "-group by merchant, window(event_time, '15 minutes')" in said
    assert "+group by merchant, window(event_time, '10 minutes')" in said

    assert code(cfg, put_back=True) == 0
    said = capsys.readouterr().out
    assert path.read_text() == windowed_counts_job(JOB, 10)
    assert f"written as version {first['version']} had it: the job is its checkpoint's " in said
    assert code(cfg) == 0
    assert f"the code is version {first['version']}, its checkpoint's" in capsys.readouterr().out
    # a second put-back has nothing to do and writes nothing
    stamp = path.stat().st_mtime_ns
    assert "nothing to put back" in put_code_back(cfg, get_job(JOB))
    assert path.stat().st_mtime_ns == stamp


def test_what_the_file_cannot_put_back_is_said_not_claimed(job):
    cfg, path, first = job
    checkpoint = cfg.paths.checkpoint(JOB)
    # a stream's declaration changed since the record (here: the record's copy of it)
    sources = json.loads(json.dumps(first["parts"]["sources"]))
    sources["transactions"]["fields"].append(["note", "string"])
    parts = {**first["parts"], "sources": sources}
    write_record(checkpoint, {**first, "parts": parts, "version": version_of(parts)})
    with pytest.raises(CodeNotKept) as refused:
        put_code_back(cfg, get_job(JOB))
    assert path.read_text() == windowed_counts_job(JOB, 10)  # the file is written all the same
    said = str(refused.value)
    assert f"version {first['version']}, not its checkpoint's {version_of(parts)}: " in said
    assert "sources still differ" in said
    assert f"`tidemark rebuild {JOB}`" in said

    # a record from before job files were kept: nothing written, and said so
    path.write_text(windowed_counts_job(JOB, 15))
    write_record(checkpoint, {k: v for k, v in first.items() if k != "source"})
    with pytest.raises(CodeNotKept, match="from your version control"):
        put_code_back(cfg, get_job(JOB))
    assert path.read_text() == windowed_counts_job(JOB, 15)
    assert read_record(checkpoint).get("source") is None


def test_a_file_that_no_longer_loads_is_put_back_from_the_record(job):
    cfg, path, first = job
    path.write_text(windowed_counts_job(JOB, 10).replace("-- source: transactions\n", ""))
    with pytest.raises(KeyError, match="is left out"):
        get_job(JOB)
    with pytest.raises(operate.OperationError, match=f"`tidemark code {JOB} --put-back`"):
        code(cfg)
    assert code(cfg, put_back=True) == 0
    assert path.read_text() == windowed_counts_job(JOB, 10)
    assert get_job(JOB).name == JOB and code(cfg) == 0
