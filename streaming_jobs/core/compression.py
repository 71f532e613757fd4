"""Landing files compressed by their name's extension, as Spark's text source reads them.

Spark picks Hadoop's codec from a file's extension (any case). A file whose bytes do not
decompress failed every try of the batch that listed it, so one such file stopped its stream
for good; a ``.bz2`` or ``.lz4`` file that is not one was read as no lines at all. Ingestion
reads only what `unreadable` finds nothing wrong with, and the landing accounting counts lines
with `line_count`, both by these rules.
"""

from __future__ import annotations

import bz2
import zlib

CHUNK = 1 << 20

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


def _decompressor(codec: str):
    if codec == "gzip":
        return zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    if codec == "zlib":
        return zlib.decompressobj()
    return bz2.BZ2Decompressor()


def _pieces(unpack, data: bytes):
    """What ``unpack`` makes of ``data``, at most CHUNK bytes at a time (a small file may hold
    gigabytes once decompressed), until its stream ends."""
    if isinstance(unpack, bz2.BZ2Decompressor):
        for start in range(0, len(data), CHUNK):
            yield unpack.decompress(data[start : start + CHUNK], CHUNK)
            while not unpack.eof and not unpack.needs_input:
                yield unpack.decompress(b"", CHUNK)
            if unpack.eof:
                return
        return
    for start in range(0, len(data), CHUNK):
        yield unpack.decompress(data[start : start + CHUNK], CHUNK)
        while unpack.unconsumed_tail and not unpack.eof:
            yield unpack.decompress(unpack.unconsumed_tail, CHUNK)
        if unpack.eof:
            return


def _decompressed_lines(data: bytes, codec: str) -> int:
    """Lines in ``data`` decompressed, member after member (Spark reads a file of several gzip
    or bzip2 members whole); ValueError when the bytes are not that codec's, cut short, or
    followed by bytes that are not."""
    newlines, last, rest, first = 0, b"", data, True
    while True:
        unpack = _decompressor(codec)
        try:
            for out in _pieces(unpack, rest):
                if out:
                    newlines, last = newlines + out.count(b"\n"), out[-1:]
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
    return newlines + (1 if last and last != b"\n" else 0)


def line_count(data: bytes, name: str) -> int:
    """Lines as ingestion reads them from a file called ``name`` holding ``data``: ended by '\\n'
    only (a last line without one counts), decompressed for a name Spark decompresses.
    ValueError, saying why, for bytes Spark could not read under that name."""
    suffix = extension(name)
    if suffix in REFUSED_CODECS:
        raise ValueError(
            f"its name ends in {suffix}: {REFUSED_CODECS[suffix]}; land it uncompressed, or "
            "compressed as .gz or .bz2"
        )
    codec = DECOMPRESS.get(suffix)
    if codec is None or not data:  # an empty file is no lines, compressed or not
        return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    try:
        return _decompressed_lines(data, codec)
    except (ValueError, OSError, EOFError, zlib.error) as exc:
        raise ValueError(
            f"its name says {suffix} but it does not decompress ({exc}); land it again whole, or "
            f"under a name without {suffix} if it is not compressed"
        ) from None
