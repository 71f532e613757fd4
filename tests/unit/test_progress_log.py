"""The progress listener's batch counter, which a graceful stop waits on (no Spark here: the
listener's callbacks are called as Spark's listener bus calls them, from another thread)."""

from __future__ import annotations

import json
import threading
import time
from types import SimpleNamespace

from streaming_jobs.runtime.progress import ProgressLog


def progress_event(run_id: str, batch_id: int) -> SimpleNamespace:
    body = {
        "id": "q",
        "runId": run_id,
        "name": "job",
        "batchId": batch_id,
        "timestamp": "2026-01-01T00:00:00.000Z",
        "numInputRows": 1,
        "sources": [],
    }
    return SimpleNamespace(progress=SimpleNamespace(json=json.dumps(body)))


def test_a_stop_waiting_for_the_batch_in_flight_wakes_when_it_reports_and_not_before():
    log = ProgressLog()
    log.onQueryProgress(progress_event("run-1", 0))
    assert log.batches_reported("run-1") == 1
    assert log.batches_reported("run-2") == 0
    # nothing new reported: the wait times out
    started = time.monotonic()
    assert not log.wait_batch_reported("run-1", after=1, timeout=0.3)
    assert time.monotonic() - started >= 0.3
    # another run's batch does not wake it; its own next batch does, at once
    threading.Timer(0.2, log.onQueryProgress, [progress_event("run-2", 0)]).start()
    threading.Timer(0.5, log.onQueryProgress, [progress_event("run-1", 1)]).start()
    started = time.monotonic()
    assert log.wait_batch_reported("run-1", after=1, timeout=10)
    assert 0.4 < time.monotonic() - started < 5
    assert log.batches_reported("run-1") == 2
    # the rows are still there for the flush, and the count does not depend on taking them
    assert [r["batch_id"] for r in log.take("run-1")] == [0, 1]
    assert log.batches_reported("run-1") == 2
    # a run that ended is forgotten (the counter stays bounded over days of restarts)
    log.onQueryTerminated(SimpleNamespace(runId="run-1", exception=None))
    assert log.batches_reported("run-1") == 0
