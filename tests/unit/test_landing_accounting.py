"""Landing accounting while ingestion runs: a batch in flight is not a broken contract."""

import os
import time

import pyarrow as pa
from deltalake import write_deltalake

from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.core.checkpoints import query_name
from streaming_jobs.operations.landing import account


def _rows(files_and_batches: list[tuple[str, int]]) -> pa.Table:
    return pa.table(
        {
            "_source_file": [f"file://{f}" for f, _ in files_and_batches],
            "_ingest_batch_id": pa.array([b for _, b in files_and_batches], pa.int64()),
        }
    )


def test_a_batch_in_flight_is_waited_for_and_a_skipped_file_is_still_named(tmp_path):
    cfg = TidemarkConfig.from_env().with_data_root(tmp_path / "root")
    landing = cfg.paths.landing_dir("transactions")
    landing.mkdir(parents=True)
    now = time.time()

    def landed(name: str, lines: int, at: float):
        path = landing / name
        path.write_text("".join(f'{{"n": {i}}}\n' for i in range(lines)))
        os.utime(path, (at, at))
        return str(path.resolve())

    # batch 0 was planned at now-100 and committed at now-10; batch 1 is planned, not committed
    checkpoint = cfg.paths.checkpoint(query_name("transactions"))
    for folder, name, at in (
        ("offsets", "0", now - 100),
        ("commits", "0", now - 10),
        ("offsets", "1", now - 5),
    ):
        (checkpoint / folder).mkdir(parents=True, exist_ok=True)
        (checkpoint / folder / name).write_text("v1\n")
        os.utime(checkpoint / folder / name, (at, at))
    half = landed("half.jsonl", 3, now - 50)  # batch 1: bronze written, quarantine not yet
    grown = landed("grown.jsonl", 2, now - 200)  # batch 0 read 1 line; one was added later
    skipped = landed("skipped.jsonl", 2, now - 300)  # before batch 0 was planned, never read
    landed("during.jsonl", 2, now - 50)  # landed while batch 0 ran: for batch 1 or 2
    write_deltalake(
        str(cfg.paths.table("bronze", "transactions")), _rows([(half, 1), (half, 1), (grown, 0)])
    )
    write_deltalake(str(cfg.paths.table("quarantine", "transactions")), _rows([]).slice(0, 0))
    assert skipped  # (its path, for the message below)

    findings = sorted(f.message for f in account(cfg, "transactions", now=now).findings)
    assert [m.split(":")[0] for m in findings] == [
        "landing/transactions/grown.jsonl",
        "landing/transactions/skipped.jsonl",
    ]
    assert "1 lines were added after it was read (1 of 2 ingested)" in findings[0]
    assert "none of its 2 lines were ingested" in findings[1]
