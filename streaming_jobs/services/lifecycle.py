"""One lifecycle for every server tidemark starts on 127.0.0.1 for a data root: the SQL
endpoint, the Kafka broker, the Spark cluster (and any the next ones add).

A server is a `Service`. Its supervisor is a Python process of its own (``python -m`` the
service's module, in a session of its own so Ctrl-C in the starting terminal does not reach
it), which runs the server (JVMs it starts, or a Spark session in itself) until SIGTERM, or
until the process that started it dies when it was started for a session (``owned``: the
owner's pid in the service's ``TIDEMARK_*_OWNER_PID``). Once the server answers, the supervisor
announces it in the service's info file (JSON: its pid, port and what else callers need),
written whole or not at all, and removes the file when it stops. So:

- `Service.discover`: the running server, from the info file, its process and its port;
- `Service.start`: the running one, or a new one once it answers (a port taken by another
  program, a supervisor that exits first, or no answer in time is an error naming the log);
- `Service.stop`: SIGTERM to the supervisor, which stops its server cleanly; past the timeout
  SIGKILL to it and to the processes it named;
- `Service.status`: one line for the terminal;
- `Service.main`: the supervisor's entry point (signals, the exit code, errors in one line).
  It holds the service's supervisor lock (next to the info file) until its last process has
  exited: a server started while the previous one still shuts down (its info file is gone
  first) waits for it, rather than meeting its half-closed files and ports.

A subclass says what differs: its port, its info file, its log, what to prepare before the
supervisor starts (jars to resolve) and `Service.run`, the supervisor's body.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from streaming_jobs.core.config import CHECKOUT, TidemarkConfig
from streaming_jobs.core.locations import lock_held
from streaming_jobs.services.processes import (
    accepts,
    alive,
    launch_supervisor,
    port_free,
    stop_supervisor,
    wait_for,
    write_json,
)

HOST = "127.0.0.1"


def stop_children(procs: list[subprocess.Popen], timeout: float) -> None:
    """SIGTERM each process in order (each may shut down cleanly), then wait; past
    ``timeout`` seconds for one, SIGKILL it."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class ServiceError(RuntimeError):
    """A server cannot start or stop; the message says why and where its log is."""


class Service:
    """A server of one data root; see the module doc."""

    title = "the server"  # in messages: "the Kafka broker"
    command = "tidemark"  # what the user types to manage it: "tidemark kafka"
    module = ""  # the supervisor: python -m <module>
    owner_variable = ""  # TIDEMARK_<X>_OWNER_PID
    port_variable = ""  # TIDEMARK_<X>_PORT: the setting that moves the port
    log_name = ""  # under <data root>/logs/
    start_timeout = 120.0
    stop_timeout = 60.0

    def __init__(self, cfg: TidemarkConfig, environ: Mapping[str, str] | None = None) -> None:
        self.cfg = cfg
        # the environment its supervisor inherits (None: this process's, when it starts); a
        # server started from a thread takes a copy made before, not what other threads set
        self.environ = environ

    # --- what each server says -----------------------------------------------------------

    @property
    def port(self) -> int:
        raise NotImplementedError

    @property
    def info_file(self) -> Path:
        raise NotImplementedError

    def prepare(self) -> None:
        """Before the supervisor starts, in the caller (resolve jars: not on the clock)."""

    def supervisor_env(self) -> dict[str, str]:
        return {"TIDEMARK_DATA_ROOT": str(self.cfg.data_root), self.port_variable: str(self.port)}

    def ready(self, info: dict) -> bool:
        """Beyond answering on its port: ready to serve (`start` waits for it)."""
        return True

    def run(self, stop: threading.Event) -> int:
        """The supervisor's body: serve until ``stop`` or `owner_gone`; an exit code."""
        raise NotImplementedError

    # --- the same for every server -------------------------------------------------------

    @property
    def log(self) -> Path:
        return self.cfg.paths.logs / self.log_name

    def log_tail(self, lines: int = 25, log: Path | None = None) -> str:
        try:
            text = (log or self.log).read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def announce(self, **info) -> None:
        """Written by the supervisor once the server answers (the pid is the supervisor's)."""
        self.info_file.parent.mkdir(parents=True, exist_ok=True)
        owner = int(os.environ.get(self.owner_variable, "0") or 0)
        write_json(
            self.info_file,
            {"host": HOST, "port": self.port, "pid": os.getpid(), "owner": owner, **info},
        )

    def withdraw(self) -> None:
        self.info_file.unlink(missing_ok=True)

    def owner_gone(self) -> bool:
        """In the supervisor: the process it serves has ended."""
        return self.leaving({"owner": os.environ.get(self.owner_variable)})

    def read_info(self) -> dict | None:
        try:
            info = json.loads(self.info_file.read_text())
            int(info["pid"]), int(info["port"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return info

    @staticmethod
    def leaving(info: dict) -> bool:
        """Its owner has ended: its supervisor stops it (in a moment, or it has already)."""
        owner = int(info.get("owner") or 0)
        return bool(owner) and not alive(owner)

    def discover(self) -> dict | None:
        """The running server's info, or None (no file, its process gone, its port shut, or
        its owner gone: a server about to stop is not one to use)."""
        info = self.read_info()
        if info is None or not alive(int(info["pid"])) or self.leaving(info):
            return None
        if not accepts(info.get("host", HOST), int(info["port"])):
            return None
        return info

    def start(
        self, *, owned: bool = True, timeout: float | None = None, owner: int | None = None
    ) -> dict:
        """The running server, or a new one once it answers and is `ready`. ``owned``: it
        stops when this process ends (or ``owner``'s, a process that outlives this one: the
        test session's, whose workers share one server); without, it runs until stopped."""
        found = self.discover()
        if found:
            return found
        self._await_leaving()
        if not port_free(HOST, self.port):
            raise ServiceError(
                f"port {self.port} on {HOST} is taken by another program (or {self.title} of "
                f"another data root); stop it, or choose a free port with {self.port_variable}"
            )
        self.prepare()
        proc = launch_supervisor(
            self.module,
            self.log,
            self.supervisor_env(),
            self.owner_variable,
            owned,
            cwd=CHECKOUT,
            base=self.environ,
            owner=owner,
        )

        def answered() -> dict | None:
            info = self.discover()
            return info if info and self.ready(info) else None

        limit = self.start_timeout if timeout is None else timeout
        found = wait_for(answered, proc, limit)
        if found:
            return found
        if proc.poll() is not None:
            raise ServiceError(
                f"{self.title} exited (code {proc.returncode}) before it answered on "
                f"{HOST}:{self.port}; its log ({self.log}) ends:\n{self.log_tail()}"
            )
        proc.terminate()
        raise ServiceError(
            f"{self.title} did not answer on {HOST}:{self.port} in {limit:.0f} s; see {self.log}"
        )

    def _await_leaving(self) -> None:
        """A server whose owner has ended holds its port until its supervisor has stopped it:
        wait for that (up to ``stop_timeout``) rather than start beside it or use it."""
        info = self.read_info()
        if info is None or not self.leaving(info):
            return
        deadline = time.monotonic() + self.stop_timeout
        while self.supervisor_running() and time.monotonic() < deadline:
            time.sleep(0.2)

    def supervisor_running(self) -> bool:
        """A supervisor holds the lock: until its last process is gone (even one no process
        reaps: its exit releases the lock)."""
        return lock_held(self.supervisor_lock)

    @property
    def supervisor_lock(self) -> Path:
        return self.info_file.with_name(f"{self.info_file.stem}.supervisor.lock")

    def supervise(
        self,
        children: list[subprocess.Popen],
        stop: threading.Event,
        grace: float,
        *,
        on_port: Callable[[], None] | None = None,
        ready: Callable[[], bool] | None = None,
        **info,
    ) -> int:
        """The supervisor's watch over a server made of processes of its own (``children``):
        once its port accepts, ``on_port`` (which may start more of them, appended to
        ``children``), then it is announced (with ``info``) as soon as ``ready`` says so; until
        ``stop`` or the owner dies. 1 (or the code) if one of them dies, 3 if it is never
        ready. Then SIGTERM, last started first, and SIGKILL past ``grace`` seconds."""
        deadline = time.monotonic() + self.start_timeout
        opened = announced = False
        try:
            while not stop.wait(0.2):
                dead = [c for c in children if c.poll() is not None]
                if dead:
                    return dead[0].returncode or 1
                if not opened and accepts(HOST, self.port, 0.5):
                    opened = True
                    if on_port is not None:
                        on_port()
                if opened and not announced and (ready is None or ready()):
                    self.announce(child_pids=[c.pid for c in children], **info)
                    announced = True
                if not announced and time.monotonic() > deadline:
                    return 3
                if self.owner_gone():
                    break
        finally:
            self.withdraw()
            stop_children(children[::-1], grace)
        return 0

    def stop(self, timeout: float | None = None) -> bool:
        """Stop the server cleanly; False if none ran."""
        info = self.read_info()
        if info is None:
            self.withdraw()
            return False
        return stop_supervisor(
            int(info["pid"]),
            [int(p) for p in info.get("child_pids", [])],
            self.stop_timeout if timeout is None else timeout,
            self.info_file,
        )

    def status(self) -> str:
        info = self.discover()
        if info is None:
            return f"{self.title}: not running (start it: {self.command} start)"
        return f"{self.title}: {HOST}:{info['port']} (pid {info['pid']}, log {self.log})"

    @classmethod
    def main(cls) -> int:
        """The supervisor: run until SIGTERM or SIGINT; an error in one line, exit code 2."""
        service = cls(TidemarkConfig.from_env())
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        try:
            with service.sole_supervisor(service.stop_timeout):
                return service.run(stop)
        except ServiceError as exc:
            print(f"{service.command}: {exc}", file=sys.stderr)
            return 2
        finally:
            service.withdraw()

    def sole_supervisor(self, wait_seconds: float):
        """Hold the supervisor lock (closing the returned file releases it, as does this
        process's exit), waiting up to ``wait_seconds`` for a supervisor still stopping."""
        path = self.supervisor_lock
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a")  # noqa: SIM115 - held for the supervisor's life
        deadline = time.monotonic() + wait_seconds
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return handle
            except BlockingIOError:
                if time.monotonic() > deadline:
                    handle.close()
                    raise ServiceError(
                        f"another supervisor of {self.title} still holds {path} after "
                        f"{wait_seconds:.0f} s (a server that does not stop); stop it "
                        f"({self.command} stop) or end its processes"
                    ) from None
                time.sleep(0.2)
