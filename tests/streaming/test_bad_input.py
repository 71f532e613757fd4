"""The bad-input catalogue: every kind of bad line or file, landed for real and ingested for real.

Each case is one line of a landing file and where it must end: bronze (reason None) or
quarantine with its reason. To add a case, add a line to `CASES`. The test checks each line's
destination and reason, that quarantine keeps each line's exact bytes, and that nothing is
lost: lines landed = bronze + quarantine + the lines of files ingestion never reads (which the
landing accounting names).
"""

from __future__ import annotations

import gzip
import json
import os
import time
from dataclasses import replace
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from helpers import txn
from streaming_jobs.storage.lake import read_table
from orchestration.cli.summary import collect, render
from streaming_jobs.core.landed_bytes import LONGEST_LINE
from streaming_jobs.operations.landing import account, count_lines
from streaming_jobs.runtime.runner import run_bronze
from streaming_jobs.schemas import STREAMS, Expectation

NONNEGATIVE = Expectation("nonnegative_amount", "amount >= 0", "quarantine")


def line(event_id: str, **changes) -> bytes:
    event = {**txn(event_id, "u1", 1), **changes}
    return json.dumps(event, separators=(",", ":")).encode()


def with_text(event_id: str, old: str, new: str) -> bytes:
    return line(event_id).replace(old.encode(), new.encode())


FUTURE = (
    "event_time 9999-12-31 00:00:00 is more than 1 day after its ingest time (the "
    "stream's max_ahead)"
)
# (case, the landed line, its quarantine reason or None for bronze)
CASES = [
    ("valid", line("ok1"), None),
    ("valid, unicode text", line("ok2", merchant="café ☕"), None),
    (
        "valid, keys in another order",
        json.dumps(dict(reversed(list(txn("ok3", "u1", 2).items())))).encode(),
        None,
    ),
    ("empty line", b"", "empty line"),
    ("blank line", b"   \t", "empty line"),
    ("not JSON", b'{"event_id": "x1", ', "invalid JSON"),
    (
        "a key twice",
        with_text("x1b", '"merchant":"m1"', '"merchant":"m1","merchant":"m2"'),
        "duplicate key merchant (a key may appear once in an object)",
    ),
    ("a JSON array", b'[{"event_id": "x2"}]', "not a JSON object"),
    ("a JSON string", b'"just text"', "not a JSON object"),
    ("two objects on a line", line("x3") + line("x4"), "more than one JSON value on the line"),
    ("an object and text", line("x5") + b" trailing", "more than one JSON value on the line"),
    (
        "an object and a closing bracket",
        line("x5b") + b"]",
        "more than one JSON value on the line",
    ),
    (
        "a field missing",
        with_text("x6", ',"merchant":"m1"', ""),
        "missing required field(s): merchant",
    ),
    ("a field null", line("x7", merchant=None), "missing required field(s): merchant"),
    ("a number as text", line("x8", amount="12.5"), "amount is a JSON string, not a number"),
    ("NaN as text", line("x9", amount="NaN"), "amount is a JSON string, not a number"),
    ("Infinity as text", line("x10", amount="Infinity"), "amount is a JSON string, not a number"),
    (
        "a string field holding a number",
        line("x11", merchant=42),
        "merchant is a JSON bigint, not a string",
    ),
    (
        "a string field holding an object",
        line("x12", merchant={"name": "m"}),
        "merchant is a JSON object, not a string",
    ),
    (
        "a string field holding a boolean",
        line("x13", currency=True),
        "currency is a JSON boolean, not a string",
    ),
    (
        "a time without its date",
        line("x14", event_time="00:00:01"),
        "event_time has no date (a timestamp is an ISO-8601 date and time)",
    ),
    (
        "a date that does not exist",
        line("x15", event_time="2026-02-30T00:00:00Z"),
        "event_time is not a valid timestamp",
    ),
    ("an empty key", line(""), "key event_id is blank"),
    ("a blank key", line("   "), "key event_id is blank"),
    ("far future", line("x16", event_time="9999-12-31T00:00:00Z"), FUTURE),
    (
        "not UTF-8",
        line("x17", merchant="caf\udce9").replace(b"\\udce9", b"\xe9"),
        "not valid UTF-8 (its bytes are kept in raw_bytes)",
    ),
    (
        "control bytes, not UTF-8",
        b"\xff\xfe" + line("x18"),
        "not valid UTF-8 (its bytes are kept in raw_bytes)",
    ),
    (
        "a stream expectation (quarantine)",
        line("x19", amount=-5.0),
        "expectation nonnegative_amount failed: amount >= 0",
    ),
    # a line ends at '\n' only: a CR is a byte of its line wherever it is
    ("a CR inside a string", line("x20", merchant="a\rb").replace(b"\\r", b"\r"), "invalid JSON"),
    (
        "two objects joined by a CR",
        line("x21") + b"\r" + line("x22"),
        "more than one JSON value on the line",
    ),
    ("a line ending in a lone CR", line("ok4") + b"\r", None),
    (
        "year 0001 (bronze keeps it; the jobs count it as late)",
        line("ok5", event_time="0001-01-01T00:00:00Z"),
        None,
    ),
    ("a key of invisible characters", line("\u00a0\u200b"), "key event_id is blank"),
    # reconciliation sums fractional numbers exactly, as decimal(38, 9): one it cannot hold
    # would keep it red for good
    (
        "a huge number",
        line("x25", amount=1e30),
        "amount 1.0E30 is beyond ±1e+18 (the stream's max_abs)",
    ),
    (
        "the largest double",
        line("x26", amount=1.7976931348623157e308),
        "amount 1.7976931348623157E308 is beyond ±1e+18 (the stream's max_abs)",
    ),
    (
        "a number past the largest double",
        with_text("x27", '"amount":10.0', '"amount":1e999'),
        "amount is not a valid double",
    ),
    ("a large number within the bound", line("ok6", amount=123456789012.5), None),
    # copies of one event in one batch: identical ones are all kept (the jobs drop them); of
    # differing ones bronze keeps the copy whose fields sort first, the same in every replay
    ("an exact duplicate", line("ok1"), None),
    ("a copy with another payload (kept: its fields sort first)", line("dup1", merchant="a"), None),
    (
        "a copy with another payload (quarantined)",
        line("dup1", merchant="b"),
        "duplicate event_id with a different payload (bronze keeps the copy of the batch whose "
        "fields sort first)",
    ),
    (
        "nested deeper than the parser goes",
        with_text("x23", ',"merchant":"m1"', ',"merchant":"m1","deep":' + "[" * 999 + "]" * 999),
        "nested deeper than 999 levels (the stream's max_depth)",
    ),
    (
        "a line longer than the stream's max_line_bytes",
        line("x24", merchant="m" * 5000),
        "line longer than 4,000 bytes (the stream's max_line_bytes)",
    ),
]


@pytest.mark.slow
def test_every_line_lands_in_exactly_one_place_with_its_reason(spark, cfg, monkeypatch):
    monkeypatch.setitem(
        STREAMS,
        "transactions",
        replace(STREAMS["transactions"], expectations=(NONNEGATIVE,), max_line_bytes=4000),
    )
    folder = cfg.paths.landing_dir("transactions")
    folder.mkdir(parents=True)
    landed = b"".join(raw + b"\n" for _, raw, _ in CASES)
    (folder / "catalogue.jsonl").write_bytes(landed)
    # a file in Windows line endings is read line by line too
    (folder / "crlf.jsonl").write_bytes(line("crlf1") + b"\r\n" + line("crlf2") + b"\r\n")
    # a compressed file is read decompressed, by its name
    (folder / "packed.jsonl.gz").write_bytes(gzip.compress(line("gz1") + b"\n" + line("gz2")))
    # files ingestion never reads (the landing contract: write under such a name, then rename)
    old = time.time() - 7200
    for hidden in (".partial.jsonl", "_tmp.jsonl"):
        (folder / hidden).write_bytes(line(f"hidden-{hidden}") + b"\n")
        os.utime(folder / hidden, (old, old))
    run_bronze(spark, cfg, "transactions")

    # (not event_time: Python's datetime cannot hold the year-0001 one)
    bronze = (
        read_table(spark, cfg.paths.table("bronze", "transactions"))
        .select("event_id", "merchant", "_source_file")
        .collect()
    )
    quarantine = read_table(spark, cfg.paths.table("quarantine", "transactions")).collect()
    expected_bronze = sorted(
        [json.loads(raw)["event_id"] for _, raw, reason in CASES if reason is None]
        + ["crlf1", "crlf2", "gz1", "gz2"]
    )
    assert sorted(r.event_id for r in bronze) == expected_bronze
    assert next(r.merchant for r in bronze if r.event_id == "ok2") == "café ☕"

    got = sorted((bytes(r.raw_bytes), r.reason) for r in quarantine)
    want = sorted((raw, reason) for _, raw, reason in CASES if reason is not None)
    # line by line, with names, so a failure says which case went where
    by_bytes = dict(got)
    for case, raw, reason in CASES:
        if reason is not None:
            assert by_bytes.get(raw) == reason, (case, by_bytes.get(raw), reason)
    assert got == want  # each line exactly once, its bytes exactly as landed
    assert all(
        r.raw_line is not None and r._source_file.endswith("catalogue.jsonl") for r in quarantine
    )
    # raw_line is text any reader decodes (U+FFFD for bytes that are not UTF-8), and both tables
    # read in delta-rs and pandas, a year-0001 event included
    assert all(r.raw_line == bytes(r.raw_bytes).decode("utf-8", "replace") for r in quarantine)
    from deltalake import DeltaTable

    for layer, rows in (("bronze", bronze), ("quarantine", quarantine)):
        assert len(DeltaTable(str(cfg.paths.table(layer, "transactions"))).to_pandas()) == len(rows)

    # nothing lost: every landed line is in bronze, in quarantine, or in a file that is named
    landed_lines = sum(count_lines(f) for f in folder.iterdir())
    accounting = account(cfg, "transactions")
    assert accounting.lines == accounting.ingested == len(bronze) + len(quarantine)
    skipped = sorted(f.message.split(":")[0] for f in accounting.findings)
    assert skipped == ["landing/transactions/.partial.jsonl", "landing/transactions/_tmp.jsonl"]
    assert landed_lines == len(bronze) + len(quarantine) + 2
    # and `tidemark summary` says it holds: it counted a lone CR as a line end, as ingestion
    # does not, and said DOES NOT HOLD for this very landing
    summary = collect(spark, cfg)
    assert summary.landing_lines["transactions"] == len(bronze) + len(quarantine)
    assert "transactions: " in render(summary, cfg) and "(holds)" in render(summary, cfg)


@pytest.mark.slow
def test_any_file_name_is_ingested_and_what_must_not_be_read_is_refused(spark, cfg, tmp_path):
    """A ':' in a name failed the whole batch; '?', '[' or '\\' in a name made Spark read the
    other files twice; a symlink to a file outside the landing folder was read; a sub-folder
    was neither read nor counted."""
    folder = cfg.paths.landing_dir("transactions")
    folder.mkdir(parents=True)
    odd = ["f9-2026-01-02T10:00:00.jsonl", "with space #1 %41.jsonl", "café ☕.jsonl", "-a.jsonl"]
    for i, name in enumerate(odd):
        (folder / name).write_bytes(line(f"n{i}") + b"\n")
    refused_names = ["q?x.jsonl", "brace{a,b}[1].jsonl", "back\\slash.jsonl"]
    for i, name in enumerate(refused_names):
        (folder / name).write_bytes(line(f"r{i}") + b"\n" + line(f"r{i}b") + b"\n")
    secret = b"SECRET-e5d1c0a9-nowhere-in-the-lake"
    outside = tmp_path / "outside.txt"
    outside.write_bytes(secret + b"\n" + secret + b"\n")
    (folder / "link.jsonl").symlink_to(outside)
    (folder / "sub").mkdir()
    (folder / "sub" / "deeper.jsonl").write_bytes(line("s1") + b"\n")

    run_bronze(spark, cfg, "transactions")
    # the stream goes on: the next wave is read
    (folder / "next.jsonl").write_bytes(line("w2") + b"\n")
    run_bronze(spark, cfg, "transactions")

    bronze = read_table(spark, cfg.paths.table("bronze", "transactions")).collect()
    quarantine = read_table(spark, cfg.paths.table("quarantine", "transactions")).collect()
    assert not quarantine
    assert sorted(r.event_id for r in bronze) == ["n0", "n1", "n2", "n3", "w2"]  # each once
    # each row's lineage names its file, whatever the name
    came_from = {
        r.event_id: os.path.basename(unquote(urlsplit(r._source_file).path)) for r in bronze
    }
    assert came_from == {**{f"n{i}": name for i, name in enumerate(odd)}, "w2": "next.jsonl"}

    aside = folder / "_refused"
    assert sorted(p.name for p in aside.iterdir()) == sorted([*refused_names, "link.jsonl"])
    assert (aside / "link.jsonl").is_symlink() and outside.read_bytes().startswith(secret)
    # the link's content is nowhere in the lake: no row, and no byte of any file
    for path in cfg.paths.lake.rglob("*"):
        if path.is_file():
            assert secret not in path.read_bytes(), path

    accounting = account(cfg, "transactions")
    by_name = {f.message.split(":")[0]: f.message for f in accounting.findings}
    for name in refused_names:
        assert "refused, its name holds" in by_name[f"landing/transactions/_refused/{name}"]
    assert "refused, a symbolic link" in by_name["landing/transactions/_refused/link.jsonl"]
    assert "its 1 files (1 lines) are not read" in by_name["landing/transactions/sub/"]
    # nothing lost: every line landed in a file ingestion reads is in bronze or quarantine, and
    # the refused files' lines are counted as such (the link's are not the landing folder's)
    assert accounting.lines == accounting.ingested == len(bronze) == 5
    assert accounting.refused == 2 * len(refused_names)
    assert not accounting.holds  # refused files and the folder are named, never "healthy"


def test_an_entry_refused_after_spark_listed_it_fails_no_batch(spark, cfg, tmp_path, monkeypatch):
    """In a continuous run the landing folder is screened every half second while Spark's
    source lists it by itself: a link landed just before a listing, and moved aside by the
    next screen before the batch read it, made every try of that batch fail on the missing
    file (so the query was held). Here the screen runs inside the batch, between the listing
    and the read."""
    from streaming_jobs.runtime import ingestion

    folder = cfg.paths.landing_dir("transactions")
    folder.mkdir(parents=True)
    (folder / "a.jsonl").write_bytes(line("a1") + b"\n" + line("a2") + b"\n")
    secret = b"SECRET-0b7e-listed-then-refused"
    outside = tmp_path / "outside.txt"
    outside.write_bytes(secret + b"\n")
    (folder / "link.jsonl").symlink_to(outside)

    real_screen, real_write = ingestion.screen_landing, ingestion.BronzeBatchWriter._write
    monkeypatch.setattr(ingestion, "screen_landing", lambda folder: [])  # landed after it

    def screened_mid_batch(self, lines, batch_id):
        real_screen(folder)  # the continuous run's screen, after the listing
        return real_write(self, lines, batch_id)

    monkeypatch.setattr(ingestion.BronzeBatchWriter, "_write", screened_mid_batch)
    run_bronze(spark, cfg, "transactions")
    monkeypatch.setattr(ingestion, "screen_landing", real_screen)
    monkeypatch.setattr(ingestion.BronzeBatchWriter, "_write", real_write)
    (folder / "b.jsonl").write_bytes(line("b1") + b"\n")
    run_bronze(spark, cfg, "transactions")  # and the stream goes on

    bronze = read_table(spark, cfg.paths.table("bronze", "transactions")).collect()
    assert sorted(r.event_id for r in bronze) == ["a1", "a2", "b1"]
    assert (folder / "_refused" / "link.jsonl").is_symlink()
    for path in cfg.paths.lake.rglob("*"):
        if path.is_file():
            assert secret not in path.read_bytes(), path
    accounting = account(cfg, "transactions")
    [refused] = [f.message for f in accounting.findings if "_refused/link.jsonl" in f.message]
    assert "refused, a symbolic link" in refused and "were ingested" not in refused
    assert accounting.lines == accounting.ingested == 3


# compressed files Spark could not read as their names say: a batch listing one failed at every
# try (the stream stopped for good), or read no line of it
def _gz(*ids: str) -> bytes:
    return gzip.compress(b"\n".join(line(i) for i in ids) + b"\n")


NOT_DECOMPRESSING = {
    "plain.jsonl.gz": (b"".join(line(f"p{i}") + b"\n" for i in range(3)), "does not decompress"),
    "cut.jsonl.gz": (_gz(*(f"c{i}" for i in range(400)))[:-40], "cut short"),
    "tail.jsonl.gz": (_gz("t1", "t2") + b"trailing", "are not another gzip stream"),
    "plain.jsonl.bz2": (line("b1") + b"\n" + line("b2") + b"\n", "does not decompress"),
    "plain.jsonl.deflate": (line("d1") + b"\n", "does not decompress"),
    "frame.jsonl.lz4": (line("l1") + b"\n", "Hadoop's own block framing"),
    "frame.jsonl.snappy": (line("s1") + b"\n", "Hadoop's own block framing"),
    "native.jsonl.zst": (line("z1") + b"\n", "native zstd library"),
}


@pytest.mark.slow
def test_a_file_spark_could_not_read_is_refused_and_the_stream_goes_on(spark, cfg):
    """A .gz whose bytes are not gzip (or are cut short) failed every try of the batch that
    listed it, so one file stopped its stream for good; a .bz2, .lz4 or .snappy file that was
    not one was read as no lines, and its lines were lost without a word. A file of one line of
    hundreds of megabytes (a JSON array exported whole) ran the JVM out of memory at every try:
    one at the limit stands for it here."""
    folder = cfg.paths.landing_dir("transactions")
    folder.mkdir(parents=True)
    for name, (data, _) in NOT_DECOMPRESSING.items():
        (folder / name).write_bytes(data)
    with open(folder / "export.jsonl", "wb") as out:
        out.write(line("e1") + b"\n[")
        out.write((line("e2") + b",") * (LONGEST_LINE // len(line("e2") + b",") + 1))
        out.write(b"]\n")
    (folder / "good.jsonl.gz").write_bytes(_gz("g1", "g2") + _gz("g3"))  # two members: read whole
    (folder / "UPPER.JSONL.GZ").write_bytes(_gz("u1"))  # an extension in any case
    (folder / "empty.jsonl.gz").write_bytes(b"")
    run_bronze(spark, cfg, "transactions")
    (folder / "next.jsonl").write_bytes(line("w2") + b"\n")
    run_bronze(spark, cfg, "transactions")  # and the stream goes on

    bronze = read_table(spark, cfg.paths.table("bronze", "transactions")).collect()
    assert sorted(r.event_id for r in bronze) == ["g1", "g2", "g3", "u1", "w2"]
    assert not read_table(spark, cfg.paths.table("quarantine", "transactions")).collect()
    aside = folder / "_refused"
    assert sorted(p.name for p in aside.iterdir()) == sorted([*NOT_DECOMPRESSING, "export.jsonl"])
    for name, (data, _) in NOT_DECOMPRESSING.items():
        assert (aside / name).read_bytes() == data  # moved as it was, never rewritten

    accounting = account(cfg, "transactions")
    by_name = {f.message.split(":")[0]: f.message for f in accounting.findings}
    for name, (_, why) in NOT_DECOMPRESSING.items():
        message = by_name.pop(f"landing/transactions/_refused/{name}")
        assert "refused, its name " in message and why in message, message
        assert "its lines cannot be counted" in message, message
    export = by_name.pop("landing/transactions/_refused/export.jsonl")
    assert "refused, it holds a line of " in export and "one JSON object per line" in export
    assert not by_name, by_name
    assert accounting.lines == accounting.ingested == len(bronze) == 5
    # the export's two lines are counted as refused; the others' cannot be counted
    assert accounting.refused == 2 and not accounting.holds  # named, never "healthy"
    shown = render(collect(spark, cfg), cfg)
    assert "and 2 lines in files ingestion refused, not read" in shown
    assert "_refused/export.jsonl: refused, it holds a line of" in shown


def test_a_compressed_file_refused_after_spark_listed_it_fails_no_batch(spark, cfg, monkeypatch):
    """In a continuous run a file can be listed by Spark's source before the screen sees it:
    a .gz that did not decompress then failed its batch, and the run with it. The batch screens
    the landing folder and reads the rest again."""
    from streaming_jobs.runtime import ingestion

    folder = cfg.paths.landing_dir("transactions")
    folder.mkdir(parents=True)
    (folder / "a.jsonl").write_bytes(line("a1") + b"\n" + line("a2") + b"\n")
    (folder / "cut.jsonl.gz").write_bytes(_gz(*(f"c{i}" for i in range(400)))[:-40])
    real_screen = ingestion.screen_landing
    screens = []

    def landed_after_the_first_screen(place):
        screens.append(place)
        return [] if len(screens) == 1 else real_screen(place)

    monkeypatch.setattr(ingestion, "screen_landing", landed_after_the_first_screen)
    run_bronze(spark, cfg, "transactions")
    assert len(screens) == 2  # the one before the listing, then the batch's own
    monkeypatch.setattr(ingestion, "screen_landing", real_screen)
    (folder / "b.jsonl").write_bytes(line("b1") + b"\n")
    run_bronze(spark, cfg, "transactions")

    bronze = read_table(spark, cfg.paths.table("bronze", "transactions")).collect()
    assert sorted(r.event_id for r in bronze) == ["a1", "a2", "b1"]
    assert (folder / "_refused" / "cut.jsonl.gz").is_file()


@pytest.mark.slow
@pytest.mark.long  # a job and two reconciliations over the catalogue: make test-long
def test_the_catalogue_goes_through_a_job_and_reconciles_green_then_red_when_gold_loses_a_row(
    spark, cfg
):
    """Every kind of bad input, landed, ingested, streamed by a job and reconciled for real:
    green where both sides agree; red (never "0 compared") once gold lost a row."""
    import subprocess
    import sys

    from helpers import dbt
    from streaming_jobs.storage.registry import get_job
    from streaming_jobs.runtime.runner import run_job

    folder = cfg.paths.landing_dir("transactions")
    folder.mkdir(parents=True)
    (folder / "catalogue.jsonl").write_bytes(b"".join(raw + b"\n" for _, raw, _ in CASES))
    (folder / "f9-2026-01-02T10:00:00.jsonl").write_bytes(line("colon1") + b"\n")
    spec = get_job("failed_txn_velocity")
    run_bronze(spark, cfg, "transactions")
    run_job(spark, cfg, spec)
    # the next wave, two days later: its watermark closes the first day's windows into gold
    (folder / "next.jsonl").write_bytes(
        line("w2a", event_time="2026-01-03T00:00:00Z")
        + b"\n"
        + line("w2b", event_time="2026-01-03T00:00:30Z")
        + b"\n"
    )
    run_bronze(spark, cfg, "transactions")
    run_job(spark, cfg, spec)
    gold = cfg.paths.table("gold", spec.name)
    assert read_table(spark, gold).count() > 0

    def reconcile(*extra):
        return dbt("build", "--exclude-resource-type", "unit_test", *extra)

    def latest():
        return (
            read_table(spark, cfg.paths.dbt_table("recon", "recon_summary"))
            .where(f"job = '{spec.name}'")
            .orderBy("reconciled_at")
            .collect()[-1]
        )

    green = reconcile()
    assert green.returncode == 0, green.stdout[-3000:] + green.stderr[-2000:]
    assert latest().rows_compared > 0 and latest().unexplained_rows == 0

    # gold loses a row: the reconciliation is red, compares rows, and tidemark recon says so
    last = spark.sql(f"SELECT cast(max(window_end) AS string) FROM delta.`{gold}`").first()[0]
    spark.sql(f"DELETE FROM delta.`{gold}` WHERE window_end = timestamp'{last}'")
    # (incremental: a change to gold outside its stream makes the job's run a full one)
    red = reconcile()
    assert "gold table changed outside its stream" in red.stderr, red.stderr[-2000:]
    assert red.returncode != 0, red.stdout[-3000:]  # the blocking check failed
    recon = subprocess.run(
        [str(Path(sys.executable).with_name("tidemark")), "recon"], capture_output=True, text=True
    )
    assert recon.returncode == 1, recon.stdout
    assert spec.name in recon.stdout.splitlines()[-1] and "unexplained" in recon.stdout


# The reliability doc's bad-input table is rendered from CASES: `PYTHONPATH=tests
# .venv/bin/python tests/streaming/test_bad_input.py` rewrites it; the test below fails when it
# is stale.
DOC = Path(__file__).resolve().parents[2] / "docs/reliability.md"
BEGIN = (
    "<!-- bad-input table: generated from tests/streaming/test_bad_input.py (run it with "
    "python to update) -->"
)
END = "<!-- end of the bad-input table -->"
FILE_CASES = [
    (
        "a ':' , '%', '#', a space or unicode in a file name",
        "bronze: ingested, lineage names the file",
    ),
    (
        "'?', '*', '[', ']', '{', '}' or '\\' in a file name, or a name not UTF-8",
        "refused: moved to landing/<stream>/_refused/, its lines counted as refused",
    ),
    (
        "a symbolic link (to a file outside the landing folder)",
        "refused: moved aside; what it points to is never read",
    ),
    ("a sub-folder", "not read: named by the accounting with its files and lines"),
    ("a file replaced under its name, as many lines", "named by the accounting (size, time)"),
    ("a file named .gz, .bz2 or .deflate", "read and counted decompressed"),
    (
        "a file named .gz, .bz2 or .deflate whose bytes do not decompress (not compressed, cut "
        "short, bytes after the stream)",
        "refused: moved aside, named by the accounting with the codec's error",
    ),
    (
        "a file named .zst, .lz4 or .snappy (Hadoop's codecs, which tidemark cannot check)",
        "refused: moved aside, named by the accounting; land it uncompressed, .gz or .bz2",
    ),
    (
        "a line of 64 MiB or more (a JSON array exported whole; 600 MB ran the JVM out of memory)",
        "refused: moved aside, named by the accounting with the line's length",
    ),
    ("a 300-character value in a gold partition column", "gold: written (random file prefixes)"),
]


def render_table() -> str:
    rows = [
        f"| {case} | {'bronze' if reason is None else 'quarantine: `' + reason + '`'} |"
        for case, _, reason in CASES
    ]
    rows += [f"| {case} | {outcome} |" for case, outcome in FILE_CASES]
    return "\n".join([BEGIN, "| input | where it ends |", "|---|---|", *rows, END])


def test_the_reliability_docs_bad_input_table_is_the_catalogue():
    text = DOC.read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    assert text[start:end] == render_table(), (
        "run: PYTHONPATH=tests .venv/bin/python tests/streaming/test_bad_input.py"
    )


if __name__ == "__main__":
    text = DOC.read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    DOC.write_text(text[:start] + render_table() + text[end:])
    print(f"{DOC}: the bad-input table has {len(CASES) + len(FILE_CASES)} rows")
