"""A landing file's bytes read as Spark's text source reads them (`landed_bytes.measure`),
and what ingestion refuses by them, without a JVM."""

from __future__ import annotations

import bz2
import gzip
import random
import zlib

import pytest

from streaming_jobs.core import locations
from streaming_jobs.core.landed_bytes import CHUNK, LONGEST_LINE, measure
from streaming_jobs.runtime.ingestion import landing_refusal


def naive(data: bytes) -> tuple[int, int]:
    """(lines, longest line) the slow, obvious way: split at each '\\n'."""
    parts = data.split(b"\n")
    if parts and parts[-1] == b"":
        parts.pop()
    return len(parts), max((len(p) for p in parts), default=0)


@pytest.mark.parametrize("seed", range(6))
def test_lines_and_the_longest_line_match_a_plain_split_whatever_the_pieces(seed):
    rng = random.Random(seed)
    data = b"".join(
        b"x" * rng.choice([0, 1, 5, 70, 300, 2_000]) + rng.choice([b"\n", b"\r\n", b""])
        for _ in range(3_000)
    )
    lines, longest = naive(data)
    limit = rng.choice([50, 299, 300, 2_001, 10**9])
    cuts = sorted(rng.sample(range(1, len(data)), 40))
    pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]
    for chunks in ([data], pieces):
        found = measure(chunks, "f.jsonl", limit)
        assert found.lines == lines
        assert found.too_long == (longest if longest >= limit else None)


def test_a_line_across_chunks_is_measured_whole():
    line = b"y" * (2 * CHUNK + 7)
    found = measure([b"a\n" + line[:5], line[5:] + b"\nb"], "f.jsonl", limit=CHUNK)
    assert (found.lines, found.too_long) == (3, len(line))
    assert measure([b"a\n" + b"y" * (CHUNK - 1) + b"\n"], "f", limit=CHUNK).too_long is None
    assert measure([b"y" * CHUNK], "f", limit=CHUNK).too_long == CHUNK  # a last line, no '\n'


@pytest.mark.parametrize(
    "name, pack",
    [
        ("a.jsonl.gz", gzip.compress),
        ("a.jsonl.GZ", gzip.compress),
        ("a.jsonl.bz2", bz2.compress),
        ("a.jsonl.deflate", zlib.compress),
    ],
)
def test_compressed_files_are_measured_decompressed(name, pack):
    data = b"a\nbb\n" * 1000 + b"z" * 3 * CHUNK + b"\nlast"
    found = measure([pack(data)], name, limit=2 * CHUNK)
    assert (found.lines, found.too_long) == (2002, 3 * CHUNK)
    if not name.endswith("deflate"):  # members one after the other: read whole, as Spark does
        assert measure([pack(b"a\n") + pack(b"b\n")], name).lines == 2
    assert measure([b""], name).lines == 0


# mtime=0: gzip's header holds the time it was made, and the bytes are part of each test's id:
# the two workers of `make test` collected them a second apart and refused to start (ids differ)
@pytest.mark.parametrize(
    "name, data, why",
    [
        ("a.gz", b"plain text\n", "its name says .gz but it does not decompress"),
        ("a.gz", gzip.compress(b"a\n" * 5000, mtime=0)[:-30], "cut short"),
        ("a.gz", gzip.compress(b"a\n", mtime=0) + b"junk", "4 bytes follow the compressed stream"),
        ("a.bz2", b"plain text\n", "its name says .bz2 but it does not decompress"),
        ("a.deflate", zlib.compress(b"a\n") + b"x", "1 bytes follow the compressed stream"),
        ("a.zst", b"plain\n", "land it uncompressed, or compressed as .gz or .bz2"),
        ("a.LZ4", b"plain\n", "Hadoop's own block framing"),
    ],
)
def test_bytes_spark_cannot_read_under_their_name_say_why(name, data, why):
    with pytest.raises(ValueError, match=why):
        measure([data], name)


def test_ingestion_refuses_a_file_holding_a_line_longer_than_it_reads(tmp_path):
    """A file of one 600 MB line ran the JVM out of memory at every try of its batch. Only a
    file at least LONGEST_LINE long can hold such a line, and only such files are read."""
    long = tmp_path / "export.jsonl"
    with open(long, "wb") as out:
        out.write(b'{"a":1}\n[')
        out.write(b'{"a":1},' * (LONGEST_LINE // 8))
        out.write(b"]\n")
    big = tmp_path / "big.jsonl"
    big.write_bytes(b'{"a":1}\n' * (LONGEST_LINE // 8 + 1))
    by_name = {e.name: e for e in locations.items(tmp_path)}
    why = landing_refusal(by_name["export.jsonl"])
    assert why is not None and f"it holds a line of {LONGEST_LINE + 2:,} bytes" in why
    assert "one JSON object per line" in why
    assert landing_refusal(by_name["big.jsonl"]) is None  # large, of short lines: read


def test_a_landed_file_is_read_once_per_size_and_time(tmp_path, monkeypatch):
    """The health sensor accounts for every landing file every minute, and a continuous run
    screens every half second: each read every file's bytes at every pass (a day of files,
    on a store a GET each)."""
    from streaming_jobs.core import landed_bytes

    reads = []
    real = locations.read_chunks
    monkeypatch.setattr(locations, "read_chunks", lambda where: reads.append(where) or real(where))
    path = tmp_path / "a.jsonl.gz"
    path.write_bytes(gzip.compress(b"a\nb\n"))

    def item():
        [found] = [e for e in locations.items(tmp_path) if e.name == "a.jsonl.gz"]
        return found

    assert [landed_bytes.measured(item()).lines for _ in range(3)] == [2, 2, 2]
    assert len(reads) == 1
    path.write_bytes(gzip.compress(b"a\nb\nc\n"))  # changed under its name: read again
    assert landed_bytes.measured(item()).lines == 3 and len(reads) == 2
    path.write_bytes(b"not gzip")  # and an error is kept as well
    for _ in range(2):
        with pytest.raises(ValueError, match="does not decompress"):
            landed_bytes.measured(item())
    assert len(reads) == 3
