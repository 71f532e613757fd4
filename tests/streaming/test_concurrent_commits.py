"""Two processes committing to one Delta table on the project's real S3-compatible server at
the same moment, many times: no commit is lost. The mechanism is delta-rs's, which the ops
tables use: each commit is a conditional put of the next log entry (``If-None-Match: *``), so
of two writers of one version exactly one succeeds, and the other commits again after it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

from streaming_jobs.core.stores import s3_options

WRITER = textwrap.dedent(
    """
    import sys, time
    import pyarrow as pa
    from deltalake import write_deltalake
    from deltalake.exceptions import CommitFailedError
    from streaming_jobs.core.config import TidemarkConfig
    from streaming_jobs.core.stores import s3_options

    uri, writer, commits, start = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    options = s3_options(TidemarkConfig.from_env())
    time.sleep(max(0.0, start - time.time()))  # both begin at the same instant
    retried = 0
    for n in range(commits):
        rows = pa.table({"writer": [writer] * 2, "n": [n, n], "part": [0, 1]})
        for attempt in range(20):
            try:
                write_deltalake(uri, rows, mode="append", storage_options=options)
                break
            except CommitFailedError:
                retried += 1
    print("retried", retried, flush=True)
    """
)


def test_two_processes_appending_at_once_lose_no_commit(tmp_path, s3_bucket):
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    _, s3_cfg, _, bucket = s3_bucket
    uri = f"s3://{bucket}/ops/contended"
    options = s3_options(s3_cfg)
    write_deltalake(
        uri,
        pa.table(
            {
                "writer": pa.array([], pa.string()),
                "n": pa.array([], pa.int64()),
                "part": pa.array([], pa.int64()),
            }
        ),
        mode="append",
        storage_options=options,
    )
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    env = {
        **os.environ,
        "TIDEMARK_S3_HOME": str(s3_cfg.s3.home),
        "TIDEMARK_S3_PORT": str(s3_cfg.s3.port),
    }
    commits, start = 15, time.time() + 4
    writers = [
        subprocess.Popen(
            [sys.executable, str(script), uri, name, str(commits), str(start)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for name in ("a", "b")
    ]
    said = [w.communicate(timeout=300) for w in writers]
    assert all(w.returncode == 0 for w in writers), said

    table = DeltaTable(uri, storage_options=options)
    assert table.version() == 2 * commits  # the creation, then one version per commit
    rows = table.to_pandas()
    got = sorted(zip(rows["writer"], rows["n"], rows["part"]))
    assert got == sorted((w, n, p) for w in "ab" for n in range(commits) for p in (0, 1))
    retried = sum(int(out.split()[-1]) for out, _ in said)
    print(f"{retried} commits lost a race and were made again")
