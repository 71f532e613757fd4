"""Places under a data root, on a local disk or an object store, addressed alike, and the file
operations tidemark does on them.

A `Location` is ``/data/tidemark/checkpoints/orders`` or
``s3://bucket/prefix/checkpoints/orders``. Spark reads the second as ``s3a://...``
(`Location.spark`), delta-rs and obstore as ``s3://...`` (`Location.url`). The functions below
are the file operations on such places: local ones go to the file system, store ones to obstore
(`streaming_jobs.core.stores`), one client per bucket.

An object store has no folders: a "folder" is a key prefix, there while a key is under it. It
has no rename either, so nothing here offers one; a write of one object is atomic on both.
"""

from __future__ import annotations

import fcntl
import functools
import os
import shutil
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from streaming_jobs.core.store_settings import ObjectStoreSettings


def _default_settings() -> ObjectStoreSettings:
    """A place named by its URL alone (read back from a record) reaches the store the
    environment names (TIDEMARK_S3_*), as every tidemark process does: parsed once per
    distinct value of those variables."""
    from streaming_jobs.core.store_settings import STORE_VARIABLES

    named = tuple((k, os.environ[k]) for k in STORE_VARIABLES if k in os.environ)
    return _settings_of(named)


@functools.lru_cache(maxsize=8)
def _settings_of(named: tuple[tuple[str, str], ...]) -> ObjectStoreSettings:
    from streaming_jobs.core.store_settings import _object_store_settings

    return _object_store_settings(dict(named))


STORE_SCHEMES = ("s3://", "s3a://")


@dataclass(frozen=True)
class Location:
    """A file or folder: ``url`` is an absolute local path or ``s3://bucket/key``; ``s3`` is
    the store's settings (its keys stay out of the repr)."""

    url: str
    s3: ObjectStoreSettings | None = field(default=None, repr=False, compare=False)

    @classmethod
    def of(cls, where: str | Path | Location, s3: ObjectStoreSettings | None = None) -> Location:
        if isinstance(where, Location):
            return where
        text = str(where)
        for scheme in STORE_SCHEMES:
            if text.startswith(scheme):
                rest = text[len(scheme) :].strip("/")
                if not rest or rest.startswith("/"):
                    raise ValueError(f"{text!r} names no bucket: use s3://bucket/prefix")
                return cls(f"s3://{rest}", s3 or _default_settings())
        return cls(os.path.abspath(text))

    @property
    def on_store(self) -> bool:
        return self.url.startswith("s3://")

    @property
    def path(self) -> Path:
        """The local path; an error for a place on a store (there is no path to give)."""
        if self.on_store:
            raise TypeError(f"{self.url} is on an object store: it has no local path")
        return Path(self.url)

    @property
    def bucket(self) -> str:
        return self.url[len("s3://") :].split("/", 1)[0]

    @property
    def key(self) -> str:
        """The object key (the part after the bucket), without a leading slash."""
        parts = self.url[len("s3://") :].split("/", 1)
        return parts[1] if len(parts) > 1 else ""

    @property
    def spark(self) -> str:
        """How Spark addresses it: the local path, or ``s3a://bucket/key``."""
        return "s3a://" + self.url[len("s3://") :] if self.on_store else self.url

    @property
    def name(self) -> str:
        return self.url.rstrip("/").rsplit("/", 1)[-1]

    @property
    def parent(self) -> Location:
        return Location(self.url.rstrip("/").rsplit("/", 1)[0], self.s3)

    def __truediv__(self, part: str) -> Location:
        return Location(f"{self.url.rstrip('/')}/{part.strip('/')}", self.s3)

    def with_name(self, name: str) -> Location:
        return self.parent / name

    def __str__(self) -> str:
        return self.url


Where = Path | Location


@dataclass(frozen=True)
class Entry:
    """One file found by `entries`: its path relative to the folder listed, size, change time."""

    relative: str
    size: int
    modified: float  # seconds since the epoch


@dataclass(frozen=True)
class Item:
    """One entry directly in a folder (`items`): a file, a folder, a symbolic link (local disks
    only) or something else (a socket, a device); its size and change time (a link's own)."""

    place: Location
    kind: str  # "file", "folder", "link" or "other"
    size: int = 0
    modified: float = 0.0

    @property
    def name(self) -> str:
        return self.place.name


_clients: dict[tuple, object] = {}
_clients_guard = threading.Lock()


def lock_held(path: Path) -> bool:
    """Another open file holds an exclusive ``flock`` on the local file ``path`` (a process's
    exit releases it, so this is True only while its holder lives)."""
    if not path.exists():
        return False
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


def store_of(where: Location):
    """The obstore client for ``where``'s bucket (one per bucket and settings, kept)."""
    s3 = where.s3 or _default_settings()
    ident = (s3.endpoint, s3.region, s3.path_style, s3.access_key_id, str(s3.home), where.bucket)
    with _clients_guard:
        if ident not in _clients:
            from streaming_jobs.core.stores import s3_store

            _clients[ident] = s3_store(s3, where.bucket)
        return _clients[ident]


def _prefix(where: Location) -> str | None:
    """The key prefix to list a folder by: object_store lists by whole path segments, so
    ``a/b`` lists ``a/b/...`` and not ``a/bc``."""
    return where.key.rstrip("/") or None


def _without_markers(objects: list[dict], prefix: str | None) -> list[dict]:
    """Listed objects but folder markers: Hadoop's S3A makes a ``folder/`` object for each
    folder it creates (SeaweedFS lists its folders so too), and object_store names it
    ``folder``, like a file. An empty object named like the folder listed, or like a folder
    that holds other keys, is such a marker, and so is tidemark's own (`FOLDER_MARKER`). (An
    empty folder's own marker, listed from its parent, looks like an empty file: `copy_tree`
    skips it when it cannot be copied.)"""
    folders = {prefix} if prefix else set()
    for o in objects:
        parts = o["path"].split("/")[:-1]
        folders.update("/".join(parts[:n]) for n in range(1, len(parts) + 1))
    return [
        o
        for o in objects
        if not (
            int(o["size"]) == 0
            and (o["path"] in folders or o["path"].rsplit("/", 1)[-1] == FOLDER_MARKER)
        )
    ]


def _relative(where: Location, path: str) -> str:
    prefix = _prefix(where)
    return path[len(prefix) + 1 :] if prefix else path


def read_bytes(where: Where) -> bytes:
    """The file's bytes; FileNotFoundError when there is none."""
    where = Location.of(where)
    if not where.on_store:
        return where.path.read_bytes()
    import obstore
    from obstore.exceptions import NotFoundError

    try:
        return bytes(obstore.get(store_of(where), where.key).bytes())
    except (NotFoundError, FileNotFoundError):
        raise FileNotFoundError(where.url) from None


def read_chunks(where: Where, size: int = 8 << 20) -> Iterator[bytes]:
    """The file's bytes, a part at a time (a file of gigabytes is never held whole);
    FileNotFoundError when there is none."""
    where = Location.of(where)
    if not where.on_store:
        with open(where.path, "rb") as handle:
            while part := handle.read(size):
                yield part
        return
    import obstore
    from obstore.exceptions import NotFoundError

    try:
        for part in obstore.get(store_of(where), where.key).stream(min_chunk_size=size):
            yield bytes(part)
    except (NotFoundError, FileNotFoundError):
        raise FileNotFoundError(where.url) from None


def read_text(where: Where) -> str:
    return read_bytes(where).decode()


def write_bytes(where: Where, data: bytes) -> None:
    """Write the whole file at once: a reader sees the old content or the new, never a part."""
    where = Location.of(where)
    if where.on_store:
        import obstore

        obstore.put(store_of(where), where.key, data)
        return
    folder = where.path.parent
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f".{where.name}.{uuid.uuid4().hex[:8]}.tmp"
    with open(partial, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(partial, where.path)
    handle = os.open(folder, os.O_RDONLY)  # the rename made durable too
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def is_file(where: Where) -> bool:
    where = Location.of(where)
    if not where.on_store:
        return where.path.is_file()
    import obstore
    from obstore.exceptions import NotFoundError

    try:
        obstore.head(store_of(where), where.key)
        return True
    except (NotFoundError, FileNotFoundError):
        return False


def is_dir(where: Where) -> bool:
    """A local folder, or a prefix with at least one key under it."""
    where = Location.of(where)
    if not where.on_store:
        return where.path.is_dir()
    import obstore

    for batch in obstore.list(store_of(where), _prefix(where), chunk_size=1):
        if batch:
            return True
    return False


def exists(where: Where) -> bool:
    return is_file(where) or is_dir(where)


def names(where: Where) -> list[str]:
    """The names directly in a folder (files and folders), sorted; [] when it is not there."""
    return [item.name for item in items(where)]


def items(where: Where) -> list[Item]:
    """What is directly in a folder, sorted by name; [] when it is not there. A link is a link
    (never followed); on a store, a folder is a prefix with a key under it."""
    where = Location.of(where)
    if not where.on_store:
        found = []
        try:
            with os.scandir(where.path) as listed:
                for entry in listed:
                    try:
                        stat = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:  # removed meanwhile
                        continue
                    if entry.is_symlink():
                        kind = "link"
                    elif entry.is_dir(follow_symlinks=False):
                        kind = "folder"
                    elif entry.is_file(follow_symlinks=False):
                        kind = "file"
                    else:
                        kind = "other"
                    found.append(Item(where / entry.name, kind, stat.st_size, stat.st_mtime))
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(found, key=lambda i: i.name)
    import obstore

    listed = obstore.list_with_delimiter(store_of(where), _prefix(where))
    found = [
        Item(
            Location(f"s3://{where.bucket}/{o['path']}", where.s3),
            "file",
            int(o["size"]),
            o["last_modified"].timestamp(),
        )
        for o in _without_markers(listed["objects"], _prefix(where))
    ]
    for folder in listed["common_prefixes"]:
        place = Location(f"s3://{where.bucket}/{folder.rstrip('/')}", where.s3)
        if is_dir(place):  # some stores keep listing a folder emptied by deletes
            found.append(Item(place, "folder"))
    return sorted(found, key=lambda i: i.name)


def is_link(where: Where) -> bool:
    """A symbolic link (local disks only: a store has none)."""
    where = Location.of(where)
    return not where.on_store and where.path.is_symlink()


def canonical(where: Where) -> str:
    """One name per file, as readers record it: the local path with every link resolved, or
    ``s3://bucket/key``."""
    where = Location.of(where)
    return where.url if where.on_store else str(where.path.resolve())


def from_spark_uri(uri: str) -> str:
    """A file as Spark names it (``file:///...``, ``s3a://bucket/...``, URL-encoded), in
    `canonical`'s form."""
    from urllib.parse import unquote, urlsplit

    parts = urlsplit(uri)
    if parts.scheme in ("s3", "s3a"):
        return f"s3://{parts.netloc}{unquote(parts.path)}"
    return unquote(parts.path)


def stat(where: Where) -> Entry | None:
    """The file's size and change time (``relative`` is its name); None when it is not there."""
    where = Location.of(where)
    if not where.on_store:
        try:
            found = os.stat(where.path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return Entry(where.name, found.st_size, found.st_mtime)
    import obstore
    from obstore.exceptions import NotFoundError

    try:
        meta = obstore.head(store_of(where), where.key)
    except (NotFoundError, FileNotFoundError):
        return None
    return Entry(where.name, int(meta["size"]), meta["last_modified"].timestamp())


# The empty object that keeps a folder on a store (`make_folder`): its name starts with '_',
# which Spark's file sources skip. (A ``key/`` marker is no use: object_store lists it as a
# file named like the folder.)
FOLDER_MARKER = "_tidemark_folder"


def make_folder(where: Where) -> None:
    """Make the folder (and its parents) unless it is there. On a store a folder is only the
    prefix of its keys, so it gets a `FOLDER_MARKER` that stays when its last file goes (a
    streaming file source restarting on a path that is gone fails: "Option 'basePath' not
    found"), even when files are in it now: retention may archive them all while the query
    starts."""
    where = Location.of(where)
    if not where.on_store:
        where.path.mkdir(parents=True, exist_ok=True)
        return
    if not is_file(where / FOLDER_MARKER):
        write_bytes(where / FOLDER_MARKER, b"")


def move(source: Where, target: Where) -> None:
    """Move one file (a link itself, on a disk): a rename on a disk, a server-side copy then a
    delete on a store (a reader may see both for a moment, never neither)."""
    source, target = Location.of(source), Location.of(target)
    if source.on_store != target.on_store:
        raise ValueError(f"move {source} to {target}: both must be on one store or one disk")
    if not source.on_store:
        target.path.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(source.path), str(target.path))
        return
    import obstore

    if source.bucket != target.bucket:
        raise ValueError(f"move {source} to {target}: both must be in one bucket")
    obstore.copy(store_of(source), source.key, target.key)
    obstore.delete(store_of(source), source.key)


def entries(where: Where) -> list[Entry]:
    """Every file under a folder, at any depth, with size and change time; [] when absent."""
    where = Location.of(where)
    if not where.on_store:
        root = where.path
        if not root.is_dir():
            return []
        found = []
        for path in root.rglob("*"):
            try:
                stat = path.stat()
            except FileNotFoundError:  # removed meanwhile
                continue
            if path.is_file():
                found.append(Entry(str(path.relative_to(root)), stat.st_size, stat.st_mtime))
        return sorted(found, key=lambda e: e.relative)
    import obstore

    listed = [meta for batch in obstore.list(store_of(where), _prefix(where)) for meta in batch]
    found = []
    for meta in _without_markers(listed, _prefix(where)):
        modified: datetime = meta["last_modified"]
        found.append(Entry(_relative(where, meta["path"]), int(meta["size"]), modified.timestamp()))
    return sorted(found, key=lambda e: e.relative)


def delete(where: Where) -> None:
    """Remove one file (nothing when it is not there)."""
    where = Location.of(where)
    if not where.on_store:
        where.path.unlink(missing_ok=True)
        return
    import obstore

    obstore.delete(store_of(where), where.key)


def delete_tree(where: Where) -> None:
    """Remove a folder and everything under it (nothing when it is not there)."""
    where = Location.of(where)
    if not where.on_store:
        shutil.rmtree(where.path, ignore_errors=True)
        return
    import obstore

    store = store_of(where)
    folders = {where.key.strip("/")} - {""}
    for batch in obstore.list(store, _prefix(where)):
        paths = [meta["path"] for meta in batch]
        obstore.delete(store, paths)
        for key in paths:
            parts = key.split("/")[:-1]
            folders.update("/".join(parts[:n]) for n in range(1, len(parts) + 1))
    # Stores with folders of their own (SeaweedFS's filer) keep listing an emptied folder, and
    # Spark's S3A then takes e.g. an emptied _delta_log for a table: delete the folder entries
    # too, deepest first (a folder that is not empty, or not there, stays as it is)
    inside = where.key.strip("/")
    for folder in sorted(folders, key=lambda f: -f.count("/")):
        if not inside or folder == inside or folder.startswith(inside + "/"):
            obstore.delete(store, folder + "/")


def copy_tree(source: Where, target: Where, *, skip: tuple[str, ...] = ()) -> int:
    """Copy every file under ``source`` (but those whose relative path is in ``skip``) to the
    same place under ``target``; returns the number copied. On a store the server makes the
    copies (no byte passes through this process). The copies are new files on both: their
    times say when they were copied."""
    source, target = Location.of(source), Location.of(target)
    if source.on_store != target.on_store or (source.on_store and source.bucket != target.bucket):
        raise ValueError(f"copy {source} to {target}: both must be in one bucket or on one disk")
    copied = 0
    for entry in entries(source):
        if entry.relative in skip:
            continue
        if source.on_store:
            import obstore
            from obstore.exceptions import NotFoundError

            try:
                obstore.copy(
                    store_of(source), (source / entry.relative).key, (target / entry.relative).key
                )
            except (NotFoundError, FileNotFoundError):
                if entry.size == 0:  # an empty folder's marker (`_without_markers`)
                    continue
                raise
        else:
            (target / entry.relative).path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy((source / entry.relative).path, (target / entry.relative).path)
        copied += 1
    return copied


# -- Delta tables through delta-rs -----------------------------------------------------------


def delta_options(where: Where) -> dict[str, str] | None:
    """delta-rs's ``storage_options`` for a table at ``where``: None on a local disk; on a store,
    its endpoint and keys, and commits by conditional put (``If-None-Match: *``), so two
    writers of one version cannot both succeed."""
    where = Location.of(where)
    if not where.on_store:
        return None
    from streaming_jobs.core.stores import s3_options

    return s3_options(where.s3 or _default_settings())


def delta_table(where: Where, version: int | None = None):
    """The Delta table at ``where`` (delta-rs), at ``version`` or its latest."""
    from deltalake import DeltaTable

    where = Location.of(where)
    return DeltaTable(where.url, version=version, storage_options=delta_options(where))


def delta_create(where: Where, data, **options) -> None:
    """Write ``data`` (an Arrow table) as a new Delta table at ``where``, or append to it."""
    from deltalake import write_deltalake

    where = Location.of(where)
    write_deltalake(where.url, data, storage_options=delta_options(where), **options)


def is_delta_table(where: Where) -> bool:
    """A Delta table is at ``where``: its first commit is there, or a log checkpoint (once the
    log before it has expired). Two lookups, however long the log.

    The files, not Delta's ``DeltaTable.isDeltaTable``: that answers from the log it cached at
    its first call for the path, so a process that asked while another was creating the table
    (its ``_delta_log`` there, no commit yet) kept hearing "no table" until it read the table
    (found by the Ctrl-C test: a poll never saw a gold table that held all its rows)."""
    log = Location.of(where) / "_delta_log"
    return is_file(log / f"{0:020d}.json") or is_file(log / "_last_checkpoint")
