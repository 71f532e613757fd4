"""Leases on an object store: one owner at a time, across processes and machines, where there
is no ``flock`` (checkpoints and tables under an ``s3://`` data root).

A lease is one small JSON object, written only by conditional puts:

- **taken** by creating it (``If-None-Match: *``), or by replacing a lapsed or released record
  with ``If-Match`` on the ETag that was read, so of two contenders exactly one wins;
- **renewed** by its holder every third of its term, again with ``If-Match``: a renewal that
  fails means another process has taken the lease, and the holder is fenced;
- **released** by writing ``released: true`` (not by deleting it, so that the fencing token
  keeps counting up).

Expiry does not trust clocks across machines. A contender that finds a record held reads its
ETag and waits the record's term on its own monotonic clock: if the ETag has not changed by
then, the holder stopped renewing, and the contender takes over. If it changed, the holder is
alive and the contender is refused. The one shortcut: a holder on the same host (same boot)
whose process is gone is taken over at once, so a run killed with ``kill -9`` restarts without
waiting out its term.

The holder counts its own term from the moment it sent its last successful put, less a margin,
on its monotonic clock, which keeps counting while the process is paused (SIGSTOP, a long GC, a
suspended VM). A contender cannot take over before that term has passed for the holder too, so
`Lease.check` before a commit refuses a holder whose term ran out; it also reads the record and
compares the **fencing token** (a counter raised at every change of holder), so an old holder
resumed after a takeover cannot commit. What check cannot close, a pause between the check and
the commit itself, the commits close: tidemark's sinks write each batch once per query and batch
id (Delta's ``txnAppId``/``txnVersion``), so a late commit of a batch the new owner already
wrote is a no-op.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone

LEASE_SECONDS = 30.0
# The holder stops trusting its lease this fraction of a term before a contender could take it.
MARGIN = 0.2


class LeaseHeld(RuntimeError):
    """Another live process holds the lease; the message names it and what to do."""


class Fenced(RuntimeError):
    """This process's lease lapsed or was taken over: it must not commit, and must stop."""


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def _start_ticks(pid: int) -> str:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22): with
    the pid, it names one process even after the pid is reused."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def holder_gone_here(record: dict) -> bool:
    """True when the record's holder ran on this machine, since its last boot, and is gone."""
    if record.get("host") != socket.gethostname() or record.get("boot") != _boot_id():
        return False
    pid = record.get("pid")
    if not isinstance(pid, int):
        return False
    return _start_ticks(pid) != record.get("started")


@dataclass
class Lease:
    """A lease at ``key`` in ``store`` (an obstore store), held by ``holder`` (a run id or a
    command) for terms of ``seconds``. ``info`` goes into the record for whoever is refused.

    Use as a context manager: it takes the lease (waiting for a lapsed holder's term), renews it
    in a daemon thread, and releases it at the end.
    """

    store: object
    key: str
    holder: str
    seconds: float = LEASE_SECONDS
    info: dict = field(default_factory=dict)
    token: int | None = field(default=None, init=False)
    _etag: str | None = field(default=None, init=False, repr=False)
    _valid_until: float = field(default=0.0, init=False, repr=False)
    _fenced: str | None = field(default=None, init=False, repr=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _renewer: threading.Thread | None = field(default=None, init=False, repr=False)
    _guard: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    # -- the record --------------------------------------------------------------------------

    def _record(self, token: int, *, released: bool = False) -> bytes:
        return json.dumps(
            {
                "holder": self.holder,
                "token": token,
                "seconds": self.seconds,
                "released": released,
                "host": socket.gethostname(),
                "boot": _boot_id(),
                "pid": os.getpid(),
                "started": _start_ticks(os.getpid()),
                "written": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                **self.info,
            }
        ).encode()

    def read(self) -> tuple[dict | None, str | None]:
        """The record as stored, and its ETag; (None, None) when there is none."""
        import obstore
        from obstore.exceptions import NotFoundError

        try:
            got = obstore.get(self.store, self.key)
        except (NotFoundError, FileNotFoundError):
            return None, None
        body = bytes(got.bytes())
        try:
            return json.loads(body), got.meta["e_tag"]
        except ValueError:  # not ours to read: treat as a record no one renews
            return {"holder": "unreadable record", "token": 0, "seconds": self.seconds}, got.meta[
                "e_tag"
            ]

    def _put(self, body: bytes, mode) -> str:
        import obstore

        sent = time.monotonic()
        etag = obstore.put(self.store, self.key, body, mode=mode)["e_tag"]
        self._valid_until = sent + self.seconds * (1 - MARGIN)
        return etag

    # -- taking and giving back ---------------------------------------------------------------

    def acquire(self, wait: float | None = None) -> int:
        """Take the lease and return its fencing token.

        A free, released or dead-here record is taken at once. A record someone else holds is
        watched for a term (``wait`` caps it, default the record's term plus a little): a
        renewal seen means a live holder, and `LeaseHeld` is raised at once; no renewal within
        the term means the holder is gone, and the lease is taken over.
        """
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        started = time.monotonic()
        watched: tuple[str, float] | None = None
        while True:
            record, etag = self.read()
            if record is None:
                try:
                    self._etag = self._put(self._record(1), "create")
                    self.token = 1
                    return 1
                except AlreadyExistsError:
                    continue
            term = float(record.get("seconds") or self.seconds)
            now = time.monotonic()
            if watched and watched[0] != etag and not record.get("released"):
                raise self._held(record)
            lapsed = watched is not None and now - watched[1] >= term
            if record.get("released") or holder_gone_here(record) or lapsed:
                token = int(record.get("token") or 0) + 1
                try:
                    self._etag = self._put(self._record(token), {"e_tag": etag})
                    self.token = token
                    return token
                except PreconditionError:  # another contender won, or the holder renewed
                    watched = None
                    continue
            if watched is None:
                watched = (etag, now)
            limit = term + 2.0 if wait is None else wait
            if now - started >= limit:
                raise self._held(record)
            time.sleep(min(0.5, max(0.05, term / 20)))

    def _held(self, record: dict) -> LeaseHeld:
        return LeaseHeld(
            f"{self.key} is held by {record.get('holder', 'another process')} (pid "
            f"{record.get('pid', '?')} on {record.get('host', '?')}, renewed "
            f"{record.get('written', '?')}); one owner at a time. Stop that run first "
            "(terminate it in Dagster, or Ctrl-C the command); a holder that died releases it "
            f"within {record.get('seconds', self.seconds)} s."
        )

    def renew(self) -> None:
        """Extend the term; `Fenced` when another process has taken the lease meanwhile."""
        from obstore.exceptions import NotFoundError, PreconditionError

        with self._guard:
            if self._fenced:
                raise Fenced(self._fenced)
            try:
                self._etag = self._put(self._record(self.token), {"e_tag": self._etag})
            except (PreconditionError, NotFoundError, FileNotFoundError):
                record, _ = self.read()
                self._fenced = (
                    f"lease {self.key} (token {self.token}) was taken over by "
                    f"{(record or {}).get('holder', 'another process')} (token "
                    f"{(record or {}).get('token', '?')}): this process stops without committing"
                )
                raise Fenced(self._fenced) from None

    def check(self) -> None:
        """Before a commit: raise `Fenced` unless this process still holds the lease, by its
        own clock and by the record's fencing token."""
        if self._fenced:
            raise Fenced(self._fenced)
        if self.token is None:
            raise Fenced(f"lease {self.key} is not held by this process")
        if time.monotonic() > self._valid_until:
            self._fenced = (
                f"lease {self.key} (token {self.token}) lapsed: not renewed for "
                f"{self.seconds * (1 - MARGIN):.0f} s (the process was paused or the store "
                "was out of reach); another process may own it now, so this one stops "
                "without committing"
            )
            raise Fenced(self._fenced)
        record, _ = self.read()
        if record is None or record.get("token") != self.token or record.get("released"):
            self._fenced = (
                f"lease {self.key} now carries token {(record or {}).get('token')} of "
                f"{(record or {}).get('holder', 'no one')}, not this process's {self.token}: "
                "it stops without committing"
            )
            raise Fenced(self._fenced)

    def release(self) -> None:
        """Give the lease back (keeping its token), unless it was lost meanwhile."""
        from obstore.exceptions import NotFoundError, PreconditionError

        if self.token is None or self._fenced:
            return
        try:
            import obstore

            obstore.put(
                self.store,
                self.key,
                self._record(self.token, released=True),
                mode={"e_tag": self._etag},
            )
        except (PreconditionError, NotFoundError, FileNotFoundError):
            pass  # taken over already: nothing of ours to give back
        self.token = None

    # -- holding for a block ------------------------------------------------------------------

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.seconds / 3):
            try:
                self.renew()
            except Fenced:
                return
            except Exception:  # noqa: BLE001 - the store out of reach: retry; check() lapses
                continue

    def __enter__(self) -> Lease:
        self.acquire()
        self._stop.clear()
        self._renewer = threading.Thread(
            target=self._renew_loop, name=f"lease:{self.key}", daemon=True
        )
        self._renewer.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(timeout=self.seconds)
        self.release()


class _NoFence:
    """What `exclusive` yields on a local disk: the OS lock cannot be lost while held."""

    def check(self) -> None:
        return None


def _who(record: dict | None) -> str:
    """A holder's record in words, for whoever waits on it."""
    if not record:
        return "another process"
    return (
        f"{record.get('holder', 'another process')} (pid {record.get('pid', '?')} on "
        f"{record.get('host', '?')}, since {record.get('since') or record.get('written', '?')})"
    )


@contextmanager
def exclusive(
    place,
    holder: str,
    *,
    wait: float = 300.0,
    seconds: float = LEASE_SECONDS,
    waiting=None,
):
    """Hold the lock at ``place`` (a `Location` or path) for the block, waiting up to ``wait``
    seconds for others to finish: an ``flock`` on a local disk, a `Lease` on a store (whose
    ``check()`` to call before a commit). For short critical sections many processes take
    in turn, such as the commits of one ops table, and for long ones that must not overlap
    (a reconciliation): then ``waiting``, if given, is called once with who holds the lock
    (in words) when the first attempt finds it taken, and a local lock records its holder for
    that (on a store the lease's record does)."""
    from streaming_jobs.core import locations

    place = locations.Location.of(place)
    if not place.on_store:
        import fcntl

        place.path.parent.mkdir(parents=True, exist_ok=True)
        with open(place.path, "a+") as handle:
            if waiting is None:
                fcntl.flock(handle, fcntl.LOCK_EX)
                yield _NoFence()
                return
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.seek(0)
                try:
                    record = json.loads(handle.read() or "null")
                except ValueError:
                    record = None
                waiting(_who(record))
                fcntl.flock(handle, fcntl.LOCK_EX)  # (the OS gives it back if the holder dies)
            handle.seek(0)
            handle.truncate()
            since = datetime.now(timezone.utc).isoformat(timespec="seconds")
            json.dump(
                {
                    "holder": holder,
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                    "since": since,
                },
                handle,
            )
            handle.flush()
            yield _NoFence()
        return
    lease = Lease(locations.store_of(place), place.key, holder, seconds=seconds)
    deadline = time.monotonic() + wait
    pause = 0.02
    if waiting is not None:
        # (say so at once: a contender watches a held lease for a term before it is refused)
        record, _ = lease.read()
        if record and not record.get("released") and not holder_gone_here(record):
            waiting(_who(record))
            waiting = None
    while True:
        try:
            lease.__enter__()
            break
        except LeaseHeld:
            if time.monotonic() > deadline:
                raise
            if waiting is not None:
                waiting(_who(lease.read()[0]))
                waiting = None
            time.sleep(pause)
            pause = min(pause * 2, 0.5)
    try:
        yield lease
    finally:
        lease.__exit__(None, None, None)
