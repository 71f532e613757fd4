"""The ops tables with the data root on the project's real S3-compatible server: written and
read by delta-rs on the store, and each table's writer lock a lease there, so two processes
doing read-then-write rounds on one table never interleave (what an flock does on a disk)."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timezone

from streaming_jobs.core import locations
from streaming_jobs.storage import ops_tables

ROUNDS = """
import sys
from datetime import datetime, timezone
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.storage import ops_tables

cfg = TidemarkConfig.from_env().with_data_root(sys.argv[1])
writer, rounds = sys.argv[2], int(sys.argv[3])
for _ in range(rounds):
    # read the count, then append the next number: only a held lock keeps two writers from
    # both reading n and both appending n (Delta's own check lets two appends through)
    with ops_tables.locked(cfg, "stream_progress") as table:
        taken = len(table.read(where="job = 'sequence'", columns=["batch_id"]))
        table.append([{"job": "sequence", "batch_id": taken, "query_id": writer,
                       "ts": datetime.now(timezone.utc)}])
print("done")
"""


def _store_cfg(s3_bucket, tmp_path):
    _, s3_cfg, _, bucket = s3_bucket
    return s3_cfg.with_data_root(f"s3://{bucket}/root"), s3_cfg


def test_ops_tables_live_on_the_store(s3_bucket, tmp_path):
    cfg, _ = _store_cfg(s3_bucket, tmp_path)
    where = ops_tables.path(cfg, "alerts")
    assert str(where).startswith("s3://") and not ops_tables.exists(cfg, "alerts")
    assert ops_tables.read(cfg, "alerts") == []

    now = datetime.now(timezone.utc).replace(microsecond=0)
    ops_tables.upsert(
        cfg,
        "alerts",
        [{"alert_id": "a1", "kind": "state_size", "severity": "warn", "first_seen": now}],
        key="alert_id",
    )
    ops_tables.upsert(
        cfg,
        "alerts",
        [
            {"alert_id": "a1", "kind": "state_size", "severity": "critical", "first_seen": now},
            {"alert_id": "a2", "kind": "stalled", "severity": "warn", "first_seen": now},
        ],
        key="alert_id",
    )
    rows = ops_tables.read(cfg, "alerts", columns=["alert_id", "severity", "first_seen"])
    assert sorted((r["alert_id"], r["severity"], r["first_seen"]) for r in rows) == [
        ("a1", "critical", now),
        ("a2", "warn", now),
    ]
    # creation and two merges; the table and its lock are objects under the data root's key
    assert ops_tables.version(cfg, "alerts") == 2
    keys = {e.relative for e in locations.entries(cfg.paths.lake / "ops")}
    assert "alerts.lock" in keys and f"alerts/_delta_log/{0:020d}.json" in keys
    # nothing went to a local folder named like the data root
    assert not os.path.exists(str(where).replace("s3://", "/"))


def test_two_writers_doing_read_then_write_rounds_take_turns(s3_bucket, tmp_path):
    cfg, s3_cfg = _store_cfg(s3_bucket, tmp_path)
    env = {
        **os.environ,
        "TIDEMARK_S3_HOME": str(s3_cfg.s3.home),
        "TIDEMARK_S3_PORT": str(s3_cfg.s3.port),
    }
    writers, rounds = 2, 25  # 50 appends after the creation: version 50 takes a log checkpoint
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", ROUNDS, str(cfg.data_root), f"w{w}", str(rounds)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for w in range(writers)
    ]
    outcomes = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outcomes]

    rows = ops_tables.read(cfg, "stream_progress", columns=["batch_id", "query_id"])
    # every number once: no two rounds read the same count
    assert sorted(r["batch_id"] for r in rows) == list(range(writers * rounds))
    assert {r["query_id"] for r in rows} == {f"w{w}" for w in range(writers)}
    assert ops_tables.version(cfg, "stream_progress") == writers * rounds
    log = ops_tables.path(cfg, "stream_progress") / "_delta_log"
    assert locations.is_file(log / "_last_checkpoint")
