"""The landing folder on the project's real S3-compatible server: files landed as objects are
ingested once, as the same files on a local disk are; the accounting holds, names what broke
the contract (an object replaced or grown after it was read, a folder, a refused name) and
retention archives what was fully ingested, by server-side copies."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from dataclasses import replace

import pytest

from helpers import land, on_store, txn
from streaming_jobs.core import locations
from streaming_jobs.operations import retention
from streaming_jobs.operations.landing import account
from streaming_jobs.runtime.ingestion import REFUSED_DIR
from streaming_jobs.runtime.runner import run_bronze
from streaming_jobs.storage.generator import GeneratorConfig, generate, write_files
from streaming_jobs.storage.lake import read_table

STREAM = "transactions"
pytestmark = pytest.mark.slow


def _bronze(spark, cfg) -> Counter:
    rows = read_table(spark, cfg.paths.table("bronze", STREAM)).select("event_id").collect()
    return Counter(r.event_id for r in rows)


def test_landing_on_the_store_is_read_once_and_accounted_for(spark, cfg, s3_bucket, tmp_path):
    store = on_store(spark, cfg, s3_bucket)
    store = replace(store, ops=replace(store.ops, landing_retention="archive"))
    local = cfg.with_data_root(tmp_path / "local")
    gen = GeneratorConfig(stream=STREAM, events=600, files=3, seed=7)
    files = generate(gen)
    for root in (store, local):
        written = write_files(root.paths.landing_dir(STREAM), gen, files)
        assert len(written) == 3
        ingested = run_bronze(spark, root, STREAM)
        assert ingested.input_rows == sum(len(f) for f in files)
    assert _bronze(spark, store) == _bronze(spark, local) and max(_bronze(spark, store).values())
    first = account(store, STREAM)
    assert first.holds and first.lines == sum(len(f) for f in files), first.findings

    # after ingestion: an object replaced by another of as many lines, one grown by a line, a
    # name Spark would read as a pattern, and a folder
    replaced = land(store, "r.jsonl", [txn("r1", "u", 1)])
    grown = land(store, "g.jsonl", [txn("g1", "u", 2)])
    run_bronze(spark, store, STREAM)
    land(store, "r.jsonl", [txn("r1-other-event", "u", 1)])
    land(store, "g.jsonl", [txn("g1", "u", 2), txn("g2", "u", 3)])
    land(store, "p[1].jsonl", [txn("p1", "u", 4)])
    land(store, "nested/n.jsonl", [txn("n1", "u", 5), txn("n2", "u", 6)])
    # compressed objects, read in parts by the screen: one whole, one cut short (which failed
    # every try of its batch before the screen refused it)
    folder = store.paths.landing_dir(STREAM)
    packed = gzip.compress(
        b"\n".join(json.dumps(txn(f"z{i}", "u", 7)).encode() for i in range(900))
    )
    locations.write_bytes(folder / "z.jsonl.gz", packed)
    locations.write_bytes(folder / "cut.jsonl.gz", packed[:-50])
    run_bronze(spark, store, STREAM)  # reads the whole object only: the other names were read
    assert sum(n for e, n in _bronze(spark, store).items() if e.startswith("z")) == 900

    result = account(store, STREAM)
    said = {f.message.split(": ", 1)[0]: f.message for f in result.findings}
    assert sorted(said) == [
        f"landing/{STREAM}/{REFUSED_DIR}/cut.jsonl.gz",
        f"landing/{STREAM}/{REFUSED_DIR}/p[1].jsonl",
        f"landing/{STREAM}/g.jsonl",
        f"landing/{STREAM}/nested/",
        f"landing/{STREAM}/r.jsonl",
    ]
    assert "replaced after it was read" in said[f"landing/{STREAM}/r.jsonl"]
    assert "1 lines were added after it was read" in said[f"landing/{STREAM}/g.jsonl"]
    assert "2 lines" in said[f"landing/{STREAM}/nested/"]
    assert "pattern" in said[f"landing/{STREAM}/{REFUSED_DIR}/p[1].jsonl"]
    assert "cut short" in said[f"landing/{STREAM}/{REFUSED_DIR}/cut.jsonl.gz"]
    assert result.refused == 1 and not result.holds
    assert not locations.exists(store.paths.landing_dir(STREAM) / "p[1].jsonl")
    assert locations.is_file(store.paths.landing_dir(STREAM) / REFUSED_DIR / "p[1].jsonl")
    assert {replaced.name, grown.name} <= set(locations.names(store.paths.landing_dir(STREAM)))

    # retention archives the fully ingested files (the generator's three and the compressed
    # one), no other
    out = retention.Maintenance()
    retention._landing(out, f"landing/{STREAM}", store, STREAM)
    archived = sorted(e.name for e in retention.archived_files(store, STREAM))
    assert archived == sorted([*(w.name for w in written), "z.jsonl.gz"])
    left = [e.name for e in locations.items(store.paths.landing_dir(STREAM)) if e.kind == "file"]
    assert sorted(left) == ["g.jsonl", "r.jsonl"]
