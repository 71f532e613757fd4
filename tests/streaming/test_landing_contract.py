"""The landing contract, enforced: every line of every landing file is in bronze or quarantine,
and each way Spark's file source skips lines without a trace is found and named."""

from __future__ import annotations

import os
import time

import pytest

from helpers import land, txn
from streaming_jobs.operations.landing import account, count_lines
from streaming_jobs.runtime.runner import run_bronze


def test_every_way_of_breaking_the_contract_is_found(spark, cfg):
    good = land(cfg, "a.jsonl", [txn("a1", "u", 1), txn("a2", "u", 2), "not json"])
    grown = land(cfg, "b.json", [txn("b1", "u", 3)])
    renamed = land(cfg, "c.jsonl", [txn("c1", "u", 4), txn("c2", "u", 5)])
    swapped = land(cfg, "e.jsonl", [txn("e1", "u", 8)])
    run_bronze(spark, cfg, "transactions")
    assert account(cfg, "transactions").holds

    # a file replaced under its name by one of as many lines: its new line is never read
    swapped.write_text(swapped.read_text().replace('"e1"', '"e1-other-event"'))
    # after ingestion: a file grows, a name is reused for new content, a hidden file is left
    with grown.open("a") as handle:
        handle.write('{"event_id": "late-line"}\n')
    renamed.unlink()
    land(cfg, "c.jsonl", [txn("c3", "u", 6)])
    hidden = land(cfg, ".d.jsonl", [txn("d1", "u", 7)])
    old = time.time() - 7200
    os.utime(hidden, (old, old))
    for path in (cfg.paths.landing_dir("transactions") / "c.jsonl",):
        os.utime(path, (old, old))  # landed (by its mtime) before the last ingestion
    run_bronze(spark, cfg, "transactions")

    result = account(cfg, "transactions")
    messages = sorted(f.message for f in result.findings)
    assert [m.split(":")[0] for m in messages] == [
        "landing/transactions/.d.jsonl",
        "landing/transactions/b.json",
        "landing/transactions/c.jsonl",
        "landing/transactions/e.jsonl",
    ]
    assert "it was replaced after it was read" in messages[3] and "new name" in messages[3]
    assert "never read" in messages[0] and "rename it" in messages[0]
    assert "1 lines were added after it was read (1 of 2 ingested)" in messages[1]
    assert "it holds 1 lines but 2 were ingested from its name" in messages[2]
    assert result.lines == count_lines(good) + 2 + 1 + 1 == 7
    assert result.ingested == 3 + 1 + 2 + 1 == 7 and not result.holds


def test_line_counting_matches_the_ingestion_reader(spark, tmp_path):
    import bz2
    import gzip

    cases = {
        "n.txt": b"a\nb\n",
        "m.txt": b"a\nb",
        "e.txt": b"",
        "blank.txt": b"\n\n",
        # a CR is a byte of its line, wherever it is: one separator only, '\n'
        "cr.txt": b"a\rb\n",
        "crlf.txt": b"a\r\nb\r\n",
        "lone.txt": b"a\r\r\nb",
        # compressed by name: counted as Spark reads them, decompressed
        "z.jsonl.gz": gzip.compress(b"a\nb\nc\n"),
        "z.jsonl.bz2": bz2.compress(b"a\r\nb"),
    }
    expected = {
        "n.txt": 2,
        "m.txt": 2,
        "e.txt": 0,
        "blank.txt": 2,
        "cr.txt": 1,
        "crlf.txt": 2,
        "lone.txt": 2,
        "z.jsonl.gz": 3,
        "z.jsonl.bz2": 2,
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        read = spark.read.option("lineSep", "\n").text(str(tmp_path / name)).count()
        assert count_lines(tmp_path / name) == read == expected[name], name
    (tmp_path / "bad.gz").write_bytes(b"not gzip\n")
    with pytest.raises(ValueError, match=r"bad.gz: its name says .gz but it does not decompress"):
        count_lines(tmp_path / "bad.gz")
