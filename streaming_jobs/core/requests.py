"""Requests to the run that holds a checkpoint, in a folder of the data root (on a disk or a
store alike): the asker writes ``<id>.request`` (JSON), the run lists the pending ones, takes one
(its ``.request`` removed), and writes ``<id>.answer``; the asker reads the answer and removes it.
Savepoints of running jobs and, on a store, maintenance of a running writer's tables use it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone

from streaming_jobs.core import locations
from streaming_jobs.core.locations import Location


def ask(folder: Location, payload: dict) -> str:
    """Leave a request in ``folder``; its id (sortable by time)."""
    request_id = f"{datetime.now(timezone.utc):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
    locations.write_bytes(folder / f"{request_id}.request", json.dumps(payload).encode())
    return request_id


def pending(folder: Location) -> list[str]:
    """The ids of the requests in ``folder`` no one has taken."""
    return [
        name.removesuffix(".request")
        for name in locations.names(folder)
        if name.endswith(".request")
    ]


def read(folder: Location, request_id: str) -> dict | None:
    """A pending request's payload; None when it was withdrawn or taken meanwhile."""
    try:
        return json.loads(locations.read_text(folder / f"{request_id}.request"))
    except (OSError, ValueError):
        return None


def is_pending(folder: Location, request_id: str) -> bool:
    return locations.is_file(folder / f"{request_id}.request")


def withdraw(folder: Location, request_id: str) -> None:
    """Remove a request (by its asker, or by the run taking it)."""
    locations.delete(folder / f"{request_id}.request")


def answer(folder: Location, request_id: str, payload: dict) -> None:
    """The run's answer; the request is gone after it."""
    locations.write_bytes(folder / f"{request_id}.answer", json.dumps(payload).encode())
    withdraw(folder, request_id)


def is_answered(folder: Location, request_id: str) -> bool:
    return locations.is_file(folder / f"{request_id}.answer")


def collect(folder: Location, request_id: str) -> dict:
    """The answer's payload, removed once read."""
    reply = folder / f"{request_id}.answer"
    payload = json.loads(locations.read_text(reply))
    locations.delete(reply)
    return payload


def wait(
    folder: Location,
    request_id: str,
    owner_running: Callable[[], bool],
    timeout_seconds: float,
) -> dict | None:
    """The answer to ``request_id`` (collected). None when the owner stopped without answering:
    the request is withdrawn, and the asker does the work itself. `TimeoutError` when the owner
    neither answers nor stops in time (the request withdrawn)."""
    deadline = time.monotonic() + timeout_seconds
    while not is_answered(folder, request_id):
        if not owner_running():
            withdraw(folder, request_id)
            if not is_answered(folder, request_id):  # answered while we looked
                return None
        if time.monotonic() > deadline:
            withdraw(folder, request_id)
            raise TimeoutError(f"no answer within {timeout_seconds:.0f}s")
        time.sleep(0.5)
    return collect(folder, request_id)
