"""The ops tables take writes from many processes at once, and are read without a JVM."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timezone

from streaming_jobs.storage import ops_tables

WRITER = """
import sys
from datetime import datetime, timezone
from streaming_jobs.storage import ops_tables
from streaming_jobs.core.config import TidemarkConfig
cfg = TidemarkConfig.from_env()
writer, rows = sys.argv[1], int(sys.argv[2])
for i in range(rows):
    ops_tables.append(cfg, "stream_progress", [{
        "job": f"job_{writer}", "batch_id": i, "ts": datetime.now(timezone.utc),
        "state_operators": [{"operator": "op", "rows": i, "custom": {"k": i}}]}])
print("done")
"""


def test_concurrent_writers_from_several_processes_all_land(cfg):
    # Nobody created the tables up front: the writers also race to create them.
    writers, rows = 4, 13  # 52 appends: the 50th commit writes a log checkpoint
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(w), str(rows)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(writers)
    ]
    outcomes = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outcomes]

    progress = ops_tables.read(cfg, "stream_progress", columns=["job", "batch_id"])
    expected = {(f"job_{w}", i) for w in range(writers) for i in range(rows)}
    assert sorted((r["job"], r["batch_id"]) for r in progress) == sorted(expected)
    # one commit per append (plus the creation), every 50th with a log checkpoint
    log = cfg.paths.table("ops", "stream_progress") / "_delta_log"
    assert len(list(log.glob("*.json"))) == writers * rows + 1
    assert (log / "_last_checkpoint").exists()


def test_rows_are_read_back_typed_and_filtered_and_old_tables_gain_columns(cfg):
    now = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
    old_schema = ops_tables.arrow_schema("stream_progress").remove(
        ops_tables.arrow_schema("stream_progress").get_field_index("sink_version")
    )
    import pyarrow as pa
    from deltalake import write_deltalake

    # a table written by an older tidemark, without sink_version
    write_deltalake(
        str(ops_tables.path(cfg, "stream_progress")),
        pa.Table.from_pylist([{"job": "it's", "batch_id": 1, "ts": now}], schema=old_schema),
        mode="append",
    )
    assert ops_tables.read(cfg, "stream_progress", columns=["job", "sink_version"]) == [
        {"job": "it's", "sink_version": None}
    ]
    ops_tables.append(
        cfg, "stream_progress", [{"job": "other", "batch_id": 2, "ts": now, "sink_version": 7}]
    )
    # a quote in a value is escaped by literal()
    quoted = ops_tables.literal("it's")
    assert quoted == "'it''s'"
    got = ops_tables.read(
        cfg,
        "stream_progress",
        where=f"job = {quoted}",
        columns=["job", "batch_id", "ts", "sink_version"],
    )
    assert got == [{"job": "it's", "batch_id": 1, "ts": now, "sink_version": None}]
    assert [
        r["sink_version"] for r in ops_tables.read(cfg, "stream_progress", where="batch_id = 2")
    ] == [7]
