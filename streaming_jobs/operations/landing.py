"""Landing accounting: every line of every landing file is in bronze or in quarantine.

Spark's file source reads a path once, when it first lists it. So a file that grows after it
was read, a second file under a name already read, a file older than the source's
``maxFileAge`` and names starting with ``.`` or ``_`` are skipped without a trace. The landing
contract (docs/sources.md) is: write a file under a hidden name, then rename it to a unique
name, and never touch it again. `account` checks the contract per file, without a JVM: the
lines each file holds now against the rows bronze and quarantine hold from it (their
``_source_file`` lineage column, read with delta-rs).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from streaming_jobs.core import locations
from streaming_jobs.core.checkpoints import last_committed_batch
from streaming_jobs.core.landed_bytes import measure, measured
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.core.locations import Entry, Item, Location, Where
from streaming_jobs.runtime.ingestion import (
    REFUSED_DIR,
    hidden,
    landing_files,
    landing_key,
    landing_refusal,
)
from streaming_jobs.core.checkpoints import query_name
from streaming_jobs.operations.health import WARNING, Finding

# A hidden (``.``/``_``) file older than this is a file someone forgot to rename.
HIDDEN_GRACE_SECONDS = 3600


def count_lines(path: Where) -> int:
    """Lines as ingestion reads them: ended by '\n' only (a last line without one counts), in
    the file's decompressed bytes for a name Spark decompresses (`landed_bytes.measure`)."""
    place = Location.of(path)
    try:
        return measure(locations.read_chunks(place), place.name).lines
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def read_per_file(table: Where) -> dict[str, tuple]:
    """Per landing file: (rows the table holds from it, the newest ingestion batch, and the
    file's size and modification time when it was read; both None for rows ingested before
    tidemark recorded them)."""
    from deltalake import QueryBuilder
    from deltalake.exceptions import TableNotFoundError
    import pyarrow as pa

    try:
        handle = locations.delta_table(table)
    except TableNotFoundError:
        return {}
    known = {f.name for f in handle.schema().fields}
    identity = (
        'max("_source_size") as s, max("_source_modified") as m'
        if {"_source_size", "_source_modified"} <= known
        else "null as s, null as m"
    )
    rows = pa.table(
        QueryBuilder()
        .register("t", handle)
        .execute(
            f'select "_source_file" as f, count(*) as n, max("_ingest_batch_id") as b, {identity} '
            'from t group by "_source_file"'
        )
    ).to_pylist()
    return {
        locations.from_spark_uri(r["f"]) if r["f"] else "": (r["n"], r["b"], r["s"], r["m"])
        for r in rows
    }


def replaced(now: Entry | Item, size: int | None, modified) -> str | None:
    """How the file (as it is ``now``) differs from what ingestion read (size, modification
    time), or None."""
    if size is None or modified is None:
        return None
    then = modified.timestamp() if hasattr(modified, "timestamp") else modified / 1e6
    if now.size == size and abs(now.modified - then) < 1:
        return None
    return (
        f"it was replaced after it was read ({size:,} bytes modified "
        f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(then))} UTC when read, "
        f"{now.size:,} bytes modified "
        f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(now.modified))} UTC now): its "
        "new content is not read; land it again under a new name"
    )


@dataclass(frozen=True)
class Accounting:
    stream: str
    lines: int  # in the files bronze reads
    ingested: int  # bronze + quarantine rows from those files
    findings: list[Finding]
    # bronze + quarantine rows per landing file they came from, whether it is still there or not
    rows_by_file: dict[str, int] = field(default_factory=dict)
    # lines of the files ingestion refused (`ingestion.landing_refusal`; a link's are not
    # counted: what it points to is not the landing folder's)
    refused: int = 0

    @property
    def holds(self) -> bool:
        return self.lines == self.ingested and not self.findings


def account(cfg: TidemarkConfig, stream: str, now: float | None = None) -> Accounting:
    """Per file of ``landing/<stream>/``: its lines against what bronze and quarantine hold."""
    now = time.time() if now is None else now
    folder = cfg.paths.landing_dir(stream)
    ingested: dict[str, int] = {}
    newest: dict[str, int] = {}
    read_as: dict[str, tuple] = {}  # (size, modified) of each file when it was read
    for layer in ("bronze", "quarantine"):
        for name, (n, batch, size, modified) in read_per_file(
            cfg.paths.table(layer, stream)
        ).items():
            ingested[name] = ingested.get(name, 0) + n
            if batch is not None:
                newest[name] = max(newest.get(name, batch), batch)
            if size is not None:
                read_as[name] = (size, modified)
    checkpoint = cfg.paths.checkpoint(query_name(stream))
    last = last_committed_batch(checkpoint)
    # A batch writes bronze, then quarantine, then commits: the rows of the batch after the
    # last commit may be half there. Files are listed when a batch is planned (its offsets
    # file): a file landed after the last committed batch was planned is for a later batch.
    in_flight = 0 if last is None else last + 1
    planned = locations.stat(Location.of(checkpoint) / "offsets" / str(last))
    read_until = planned.modified if last is not None and planned is not None else None
    findings, lines, got = [], 0, 0
    listed = locations.items(folder)  # once: on a store each listing is a request
    for path in landing_files(folder, listed):
        key = landing_key(path.place)
        try:
            n = measured(path).lines
        except (ValueError, FileNotFoundError) as exc:
            # (not readable as its name says, or moved aside meanwhile: the screen names it)
            findings.append(
                Finding("landing_unaccounted", WARNING, f"landing/{stream}/{path.name}: {exc}")
            )
            continue
        rows = ingested.get(key, 0)
        lines, got = lines + n, got + rows
        if newest.get(key) == in_flight:
            continue
        if rows == n:
            # as many lines as were read: the same file, unless its size or time changed
            change = replaced(path, *read_as[key]) if key in read_as else None
            if change:
                findings.append(
                    Finding(
                        "landing_unaccounted", WARNING, f"landing/{stream}/{path.name}: {change}"
                    )
                )
            continue
        if rows and rows < n:
            problem = (
                f"{n - rows:,} lines were added after it was read ({rows:,} of {n:,} "
                "ingested): a landed file is read once; land new lines as a new file"
            )
        elif rows > n:
            problem = (
                f"it holds {n:,} lines but {rows:,} were ingested from its name: it was "
                "replaced or truncated after it was read; land every file under a unique "
                "name"
            )
        elif read_until is not None and path.modified < read_until - 5:
            problem = (
                f"none of its {n:,} lines were ingested though ingestion ran after it "
                "landed: its name was already read once (reuse of a name), or it is "
                "older than the source's maxFileAge; land it again under a new name"
            )
        else:
            continue  # landed after the last batch was planned: a later batch reads it
        findings.append(
            Finding("landing_unaccounted", WARNING, f"landing/{stream}/{path.name}: {problem}")
        )
    refused_lines = _refused(folder, stream, ingested, findings, listed)
    for path in listed:
        if path.kind == "folder" and not hidden(path.name):
            inside = [
                path.place / f.relative
                for f in locations.entries(path.place)
                if not locations.is_link(path.place / f.relative)
            ]
            findings.append(
                Finding(
                    "landing_unaccounted",
                    WARNING,
                    f"landing/{stream}/{path.name}/: a folder, and ingestion reads only the files "
                    f"directly in landing/{stream}/: its {len(inside)} files "
                    f"({sum(_lines_or_zero(f) for f in inside):,} lines) are not read; move each "
                    f"up into landing/{stream}/ under a new name",
                )
            )
        if path.kind == "file" and hidden(path.name) and now - path.modified > HIDDEN_GRACE_SECONDS:
            findings.append(
                Finding(
                    "landing_unaccounted",
                    WARNING,
                    f"landing/{stream}/{path.name}: a name starting with '.' or '_' is never "
                    f"read, and this file is {(now - path.modified) / 3600:.1f} h old: "
                    "rename it when it is complete",
                )
            )
    return Accounting(stream, lines, got, findings, ingested, refused_lines)


def _lines_or_zero(path: Where) -> int:
    try:
        return count_lines(path)
    except (ValueError, OSError):
        return 0


def _refused(
    folder: Where, stream: str, ingested: dict[str, int], findings: list, listed: list[Item]
) -> int:
    """Name each entry ingestion refused (moved aside, or still waiting for the next screen);
    returns the lines of the refused files. ``listed``: the folder's entries."""
    aside = Location.of(folder) / REFUSED_DIR
    entries = [
        (e, f"{REFUSED_DIR}/{e.name}", landing_refusal(e) or "moved aside by hand")
        for e in locations.items(aside)
    ]
    for e in listed:  # refused, and not moved aside yet
        if not hidden(e.name) and e.kind != "folder" and (why := landing_refusal(e)) is not None:
            entries.append((e, e.name, why))
    landed_as = locations.canonical(folder)
    total = 0
    for path, shown, why in entries:
        lines, uncounted = 0, ""
        if path.kind == "file":
            try:
                lines = measured(path).lines
            except (ValueError, OSError):
                uncounted = " (its lines cannot be counted, so the refused lines leave them out)"
        total += lines
        # rows read from its name before it was moved aside (a continuous run lists the
        # folder by itself, between two screens)
        read = ingested.get(f"{landed_as}/{path.name}", 0)
        advice = (
            f"; {read:,} of its rows were ingested before it was refused: do not land it again"
            if read
            else ""
        )
        findings.append(
            Finding(
                "landing_refused",
                WARNING,
                f"landing/{stream}/{shown}: refused, {why}{uncounted}{advice}",
            )
        )
    return total
