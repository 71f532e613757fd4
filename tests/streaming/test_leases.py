"""Leases on the project's real S3-compatible server: one owner at a time without flock, a
lapsed owner taken over after its term, a killed one at once, and an owner paused past its term
fenced off when it resumes (its commit refused, nothing doubled)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pytest

from streaming_jobs.core.leases import Fenced, Lease, LeaseHeld
from streaming_jobs.core.stores import s3_options

# A process that takes the lease, says so, and commits rows to a Delta table on the store
# (delta-rs) when told, after checking its lease: what a run does before each batch's commit.
HOLDER = textwrap.dedent(
    """
    import sys
    from deltalake import write_deltalake
    import pyarrow as pa
    from streaming_jobs.core.config import TidemarkConfig
    from streaming_jobs.core.leases import Fenced, Lease
    from streaming_jobs.core.stores import s3_options, s3_store

    bucket, key, table, seconds = sys.argv[1:5]
    cfg = TidemarkConfig.from_env()
    with Lease(s3_store(cfg, bucket), key, "holder-a", seconds=float(seconds)) as lease:
        print("held", lease.token, flush=True)
        for line in sys.stdin:
            try:
                lease.check()
            except Fenced as fenced:
                print("fenced:", fenced, flush=True)
                sys.exit(3)
            rows = pa.table({"writer": ["a"] * 3, "n": [1, 2, 3]})
            write_deltalake(f"s3://{bucket}/{table}", rows, mode="append",
                            storage_options=s3_options(cfg))
            print("committed", flush=True)
    """
)


def _holder(tmp_path, s3_cfg, bucket, key, table, seconds):
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    env = {
        **os.environ,
        "TIDEMARK_S3_HOME": str(s3_cfg.s3.home),
        "TIDEMARK_S3_PORT": str(s3_cfg.s3.port),
    }
    proc = subprocess.Popen(
        [sys.executable, str(script), bucket, key, table, str(seconds)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    line = proc.stdout.readline()
    assert line.startswith("held "), proc.stderr.read()
    return proc, int(line.split()[1])


def test_of_contenders_racing_for_a_lease_exactly_one_wins(s3_bucket):
    store = s3_bucket[0]
    for round_ in range(12):
        key = f"leases/race-{round_}.json"
        won, refused = [], []
        start = threading.Barrier(4)

        def contend(name, key=key, won=won, refused=refused, start=start):
            lease = Lease(store, key, name, seconds=30)
            start.wait()
            try:
                won.append((name, lease.acquire(wait=0)))
            except LeaseHeld as held:
                refused.append(str(held))

        threads = [threading.Thread(target=contend, args=(f"c{i}",)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(won) == 1 and len(refused) == 3, (won, refused)
        assert won[0][1] == 1
        assert all(f"held by {won[0][0]}" in said for said in refused)


def test_a_released_lease_is_taken_with_the_next_token_and_a_live_holder_refuses(s3_bucket):
    store = s3_bucket[0]
    with Lease(store, "leases/a.json", "first", seconds=3) as first:
        assert first.token == 1
        began = time.monotonic()
        with pytest.raises(LeaseHeld, match="held by first"):
            Lease(store, "leases/a.json", "second", seconds=3).acquire()
        # Refused as soon as a renewal was seen: well before the term had passed.
        assert time.monotonic() - began < 3
        first.check()
    with pytest.raises(Fenced):  # given back: no commit under it any more
        first.check()
    second = Lease(store, "leases/a.json", "second", seconds=3)
    assert second.acquire(wait=0) == 2
    second.release()


def test_a_killed_holder_here_is_taken_over_at_once(tmp_path, s3_bucket):
    store, s3_cfg, _, bucket = s3_bucket
    proc, token = _holder(tmp_path, s3_cfg, bucket, "leases/k.json", "t", seconds=30)
    proc.kill()
    proc.wait()
    began = time.monotonic()
    taker = Lease(store, "leases/k.json", "taker", seconds=30)
    assert taker.acquire() == token + 1
    assert time.monotonic() - began < 5  # not the 30 s term: its process is gone


def test_an_owner_paused_past_its_term_is_taken_over_and_fenced_off(tmp_path, s3_bucket):
    """SIGSTOP the holder past its term: a contender takes over after one term of silence and
    commits; the holder, resumed, is refused its commit, and each row is in the table once."""
    from deltalake import DeltaTable, write_deltalake
    import pyarrow as pa

    store, s3_cfg, _, bucket = s3_bucket
    seconds = 3.0
    table = f"gold-{uuid.uuid4().hex[:6]}"
    proc, token = _holder(tmp_path, s3_cfg, bucket, "leases/p.json", table, seconds)
    proc.send_signal(signal.SIGSTOP)
    try:
        began = time.monotonic()
        taker = Lease(store, "leases/p.json", "holder-b", seconds=seconds)
        assert taker.acquire() == token + 1
        assert time.monotonic() - began >= seconds  # one whole term without a renewal
        taker.check()
        write_deltalake(
            f"s3://{bucket}/{table}",
            pa.table({"writer": ["b"] * 2, "n": [1, 2]}),
            mode="append",
            storage_options=s3_options(s3_cfg),
        )
    finally:
        proc.send_signal(signal.SIGCONT)
    out, err = proc.communicate("commit\n", timeout=60)
    assert proc.returncode == 3, (out, err)
    assert "fenced:" in out and f"token {token}" in out, out

    rows = DeltaTable(f"s3://{bucket}/{table}", storage_options=s3_options(s3_cfg)).to_pandas()
    assert sorted(zip(rows["writer"], rows["n"])) == [("b", 1), ("b", 2)]
    record, _ = taker.read()
    assert record["holder"] == "holder-b" and record["token"] == token + 1
    taker.release()
