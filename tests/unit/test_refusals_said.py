"""What a job's checkpoint says of a refused or left-out version (`tidemark_refused.json`),
as the health sensor reads it."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from streaming_jobs.core.versions import REFUSED
from streaming_jobs.operations import health
from streaming_jobs.runtime import changes


class _Clock(datetime):
    at = datetime(2026, 1, 1, 9, 0, tzinfo=timezone.utc)

    @classmethod
    def now(cls, tz=None):
        return cls.at


def test_a_start_retried_and_failing_alike_keeps_the_time_it_was_first_left_out(
    tmp_path, monkeypatch
):
    """A continuous run retries a job that failed at its start every minute, saying it again:
    the alert says since when the job is out, and a store gets no write a minute."""
    monkeypatch.setattr(changes, "datetime", _Clock)
    said = tmp_path / REFUSED
    changes.say_left_out(tmp_path, "v2", "could not start: boom")
    first = said.read_bytes()
    assert json.loads(first)["at"] == "2026-01-01T09:00:00+00:00"

    monkeypatch.setattr(_Clock, "at", datetime(2026, 1, 1, 9, 5, tzinfo=timezone.utc))
    writes = []
    write = changes.locations.write_bytes
    monkeypatch.setattr(
        changes.locations,
        "write_bytes",
        lambda where, data: writes.append(where) or write(where, data),
    )
    changes.say_left_out(tmp_path, "v2", "could not start: boom")
    assert said.read_bytes() == first and writes == []
    message = health._refused_change(tmp_path).message
    assert "left it out (since 2026-01-01T09:00:00+00:00)" in message, message

    # said otherwise (another reason, another version, or waiting): stamped anew
    changes.say_left_out(tmp_path, "v2", "could not start: another reason")
    assert json.loads(said.read_bytes())["at"] == "2026-01-01T09:05:00+00:00"
    monkeypatch.setattr(_Clock, "at", datetime(2026, 1, 1, 9, 7, tzinfo=timezone.utc))
    changes.say_waiting(tmp_path, "v2", "could not start: another reason")
    record = json.loads(said.read_bytes())
    assert (record["at"], record["kind"]) == ("2026-01-01T09:07:00+00:00", "waiting")
