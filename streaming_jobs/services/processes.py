"""Local processes and ports: the checks every service of the project (the SQL endpoint, the
Kafka broker, the Dagster UI) makes before it starts or when it looks for a running one."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Mapping, TypeVar

T = TypeVar("T")


def alive(pid: int) -> bool:
    """A process with this id exists (ours or another user's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (from the state on), or None
    where there is no such file (the process is gone, or no /proc on this system)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()  # the name may hold spaces and parentheses


def identity(pid: int | None = None) -> str:
    """This process (or ``pid``) as ``host:pid:start``. The start (clock ticks after boot, from
    /proc; empty without it) tells it from a later process that is given the same id."""
    pid = pid or os.getpid()
    fields = _stat(pid)
    return f"{socket.gethostname()}:{pid}:{fields[19] if fields else ''}"


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (children, theirs, ...), from /proc; empty without it."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) is not None:
            parents[int(entry.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def pid_of(named: str) -> int:
    """The process id in an `identity` (``host:pid:start``)."""
    return int(named.rsplit(":", 2)[1])


def ended(named: str) -> bool | None:
    """Whether the process ``named`` (an `identity`) has ended: a zombie counts as ended, and so
    does a process that took its id later. None when this host cannot tell (another host's)."""
    host, _, start = named.rsplit(":", 2)
    if host != socket.gethostname():
        return None
    pid = pid_of(named)
    if not alive(pid):
        return True
    fields = _stat(pid)
    if fields is None:  # no /proc here: the id alone
        return False
    return fields[0] in ("Z", "X") or (bool(start) and fields[19] != start)


def accepts(host: str, port: int, timeout: float = 1.0) -> bool:
    """Something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def port_free(host: str, port: int) -> bool:
    """This process could listen on host:port now."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (the system picks it)."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def write_json(path: Path, data: dict) -> None:
    """Write ``data`` whole or not at all (a temporary file renamed over ``path``): a reader
    never sees half of it."""
    part = path.with_suffix(".tmp")
    part.write_text(json.dumps(data))
    part.rename(path)


def stop_supervisor(pid: int, children: list[int], timeout: float, info: Path) -> bool:
    """SIGTERM a service's supervisor and wait for it to stop its JVMs; past ``timeout``,
    SIGKILL it and them. False when it was not running (its ``info`` file is removed)."""
    if not pid or not alive(pid):
        info.unlink(missing_ok=True)
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
        try:  # our own child (a test's fixture): reap it
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
    if alive(pid):
        os.kill(pid, signal.SIGKILL)
        for child in children:
            if child and alive(child):
                os.kill(child, signal.SIGKILL)
    return True


def launch_supervisor(
    module: str,
    log: Path,
    env: dict[str, str],
    owner_variable: str,
    owned: bool,
    cwd: Path | None = None,
    base: Mapping[str, str] | None = None,
    owner: int | None = None,
) -> subprocess.Popen:
    """Start a service's supervisor, ``python -m <module>``, in a session of its own (Ctrl-C
    in this terminal does not reach it), its output appended to ``log``. ``owned``: it learns
    its owner's id from ``owner_variable`` and stops when that process ends (``owner``, or this
    process). ``env`` goes over ``base`` (default: this process's environment as it is now)."""
    full = {**(os.environ if base is None else base), **env}
    if owned:
        full[owner_variable] = str(owner or os.getpid())
    else:
        full.pop(owner_variable, None)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", module],
            env=full,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=cwd,
        )


def wait_for(
    ready: Callable[[], T | None], proc: subprocess.Popen, timeout: float, every: float = 0.3
) -> T | None:
    """The first answer of ``ready()`` that is not None, asked every ``every`` seconds for
    ``timeout``; None when ``proc`` exited first or the time ran out (``proc.poll()`` says
    which)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = ready()
        if found is not None:
            return found
        if proc.poll() is not None:
            return None
        time.sleep(every)
    return None
