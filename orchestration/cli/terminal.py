"""What a long command shows in the terminal: one line per phase, the full logs in a file.

`Console` sends everything the process and its JVM write (Dagster's event log lines, Spark's
warnings, dbt's output) to a log file under ``<data root>/logs/``, by pointing the process's
stdout and stderr at it, and keeps the terminal for the lines the command chooses to show:
what each phase did, with its counts and its time.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from streaming_jobs.core.config import TidemarkConfig


class Console:
    def __init__(self, cfg: TidemarkConfig, command: str) -> None:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        self.log_path: Path = cfg.paths.logs / f"{command}-{stamp}.log"
        self.started = time.monotonic()
        self._terminal = None
        self._saved: list[int] = []

    def __enter__(self) -> "Console":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        sys.stdout.flush()
        sys.stderr.flush()
        self._saved = [os.dup(1), os.dup(2)]
        self._terminal = os.fdopen(os.dup(1), "w", buffering=1)
        log = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 1)  # the JVM and every library write to these descriptors
        os.dup2(log, 2)
        os.close(log)
        return self

    def __exit__(self, *exc) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, saved in zip((1, 2), self._saved):
            os.dup2(saved, fd)
            os.close(saved)
        if self._terminal is not None:
            self._terminal.close()

    def line(self, text: str = "") -> None:
        """A line on the terminal (and in the log, to keep the log complete)."""
        self._terminal.write(text + "\n")
        print(text, flush=True)

    def elapsed(self) -> str:
        return f"{time.monotonic() - self.started:4.0f}s"
