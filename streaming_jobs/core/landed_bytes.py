"""How Spark's text source reads a landing file's bytes, checked without a JVM.

- Lines end at '\\n' only; a last line without one counts.
- A file is read decompressed by its name's extension (Hadoop's codecs, any case). One whose
  bytes did not decompress failed every try of the batch that listed it, so one such file
  stopped its stream for good; a ``.bz2`` or ``.lz4`` file that was not one was read as no
  lines at all.
- A line is held whole in memory: a file of one 600 MB line (a JSON array exported without
  line breaks, say) ran the JVM out of memory at every try.

Ingestion refuses what `measure` finds Spark could not read (`ingestion.landing_refusal`), and
the landing accounting counts lines with it.
"""

from __future__ import annotations

import bz2
import threading
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from streaming_jobs.core import locations
from streaming_jobs.core.locations import Item

CHUNK = 1 << 20

# The longest line ingestion reads. A longer one (past any stream's max_line_bytes, so it would
# be quarantined) is refused with its file: Spark holds a line whole, several times over, and
# a continuous run's queries share one JVM. Only a file at least this large can hold one.
LONGEST_LINE = 64 << 20

# the extensions tidemark reads decompressed, and how Python reads each as Hadoop does
DECOMPRESS = {".gz": "gzip", ".bz2": "bz2", ".deflate": "zlib"}

# the other extensions Spark's Hadoop decompresses, which tidemark refuses: it cannot check
# them, and Spark read a plain or differently framed file under them as no lines, or failed
REFUSED_CODECS = {
    ".zst": "Spark reads .zst with Hadoop's native zstd library, which this Spark lacks",
    ".lz4": "Spark reads .lz4 in Hadoop's own block framing, not the lz4 tool's",
    ".snappy": "Spark reads .snappy in Hadoop's own block framing, not snappy's framing format",
}

# every extension Spark reads compressed
COMPRESSED = frozenset(DECOMPRESS) | frozenset(REFUSED_CODECS)


def extension(name: str) -> str:
    """A file name's last extension, lower case ('' for none)."""
    return "." + name.rsplit(".", 1)[-1].lower() if "." in name else ""


@dataclass
class Measure:
    """A file's lines as Spark reads them, and the longest line if one is ``limit`` or longer."""

    limit: int = LONGEST_LINE
    lines: int = 0
    too_long: int | None = None  # that line's length in bytes, without its '\n'
    _run: int = 0  # bytes since the last '\n'
    _ended: bool = True  # the bytes so far end with '\n' (or there are none)

    def feed(self, piece: bytes) -> None:
        """The next bytes. A line inside a piece shorter than the limit cannot reach it, so a
        piece of short lines costs three searches, whatever it holds."""
        if not piece:
            return
        first = piece.find(b"\n")
        if first < 0:
            self._note(self._run + len(piece))
            self._run += len(piece)
        else:
            last = piece.rfind(b"\n")
            self._note(self._run + first)
            if last - first > self.limit:  # a line inside the piece may reach the limit
                start = first + 1
                while start <= last:
                    end = piece.find(b"\n", start)
                    self._note(end - start)
                    start = end + 1
            self.lines += piece.count(b"\n")
            self._run = len(piece) - last - 1
        self._ended = piece.endswith(b"\n")

    def _note(self, length: int) -> None:
        if length >= self.limit:
            self.too_long = max(self.too_long or 0, length)

    def close(self) -> Measure:
        if not self._ended:
            self.lines += 1
        return self


def _slices(chunks: Iterable[bytes]) -> Iterator[bytes]:
    for chunk in chunks:
        for start in range(0, len(chunk), CHUNK):
            yield chunk[start : start + CHUNK]


def _decompressor(codec: str):
    if codec == "gzip":
        return zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    if codec == "zlib":
        return zlib.decompressobj()
    return bz2.BZ2Decompressor()


def _pieces(unpack, data: bytes) -> Iterator[bytes]:
    """What ``unpack`` makes of ``data``, at most CHUNK bytes at a time (a small file may hold
    gigabytes once decompressed), until its stream ends."""
    for start in range(0, len(data), CHUNK):
        if isinstance(unpack, bz2.BZ2Decompressor):
            yield unpack.decompress(data[start : start + CHUNK], CHUNK)
            while not unpack.eof and not unpack.needs_input:
                yield unpack.decompress(b"", CHUNK)
        else:
            yield unpack.decompress(data[start : start + CHUNK], CHUNK)
            while unpack.unconsumed_tail and not unpack.eof:
                yield unpack.decompress(unpack.unconsumed_tail, CHUNK)
        if unpack.eof:
            return


def _decompressed(data: bytes, codec: str) -> Iterator[bytes]:
    """``data`` decompressed, member after member (Spark reads a file of several gzip or bzip2
    members whole); ValueError when the bytes are not that codec's, are cut short, or are
    followed by bytes that are not."""
    rest, first = data, True
    while True:
        unpack = _decompressor(codec)
        try:
            yield from _pieces(unpack, rest)
        except (OSError, zlib.error) as exc:
            if first:
                raise
            raise ValueError(
                f"{len(rest):,} bytes follow the compressed stream and are not another "
                f"{codec} stream ({exc})"
            ) from None
        first = False
        if not unpack.eof:
            raise ValueError("its bytes end before the compressed stream does (cut short?)")
        rest = unpack.unused_data
        if not rest or codec == "zlib":
            break
    if rest:
        raise ValueError(f"{len(rest):,} bytes follow the compressed stream")


def measure(chunks: Iterable[bytes], name: str, limit: int = LONGEST_LINE) -> Measure:
    """The lines of a file called ``name`` whose bytes are ``chunks``, as ingestion reads them.
    ValueError, saying why and what to do, for bytes Spark could not read under that name."""
    suffix = extension(name)
    if suffix in REFUSED_CODECS:
        raise ValueError(
            f"its name ends in {suffix}: {REFUSED_CODECS[suffix]}; land it uncompressed, or "
            "compressed as .gz or .bz2"
        )
    codec = DECOMPRESS.get(suffix)
    found = Measure(limit)
    if codec is None:
        for piece in _slices(chunks):
            found.feed(piece)
        return found.close()
    data = b"".join(chunks)  # compressed: small next to what it holds
    if not data:  # an empty file is no lines, compressed or not
        return found
    try:
        for piece in _decompressed(data, codec):
            found.feed(piece)
    except (ValueError, OSError, EOFError, zlib.error) as exc:
        raise ValueError(
            f"its name says {suffix} but it does not decompress ({exc}); land it again whole, or "
            f"under a name without {suffix} if it is not compressed"
        ) from None
    return found.close()


# Each landed file measured, by (file, size, time): a continuous run screens its landing folder
# every half second and the health sensor accounts for it every minute; each reads a file's
# bytes once in a process, not at every pass (a landing folder keeps a day of files until
# maintenance archives them, all of them with TIDEMARK_LANDING_RETENTION=keep). A file changed
# under its name changes its size or time, and is measured again.
_measured: dict[tuple[str, int, float], Measure | str] = {}
_measured_guard = threading.Lock()
MEASURED_KEPT = 200_000


def measured(entry: Item) -> Measure:
    """`measure` of a landed file, read once per (file, size, time) in this process.
    ValueError as `measure` raises it, FileNotFoundError when the file is gone."""
    key = (locations.canonical(entry.place), entry.size, entry.modified)
    with _measured_guard:
        found = _measured.get(key)
    if found is None:
        try:
            found = measure(locations.read_chunks(entry.place), entry.name)
        except ValueError as exc:
            found = str(exc)
        with _measured_guard:
            if len(_measured) >= MEASURED_KEPT:
                _measured.clear()
            _measured[key] = found
    if isinstance(found, str):
        raise ValueError(found)
    return found
