"""Queries that ended with an error, recorded in ``ops/stream_failures`` for the health sensor."""

from __future__ import annotations

import logging
from datetime import datetime, timezone

from streaming_jobs import ops_tables
from streaming_jobs.config import TidemarkConfig

LOG = logging.getLogger(__name__)


def record_failure(cfg: TidemarkConfig, job: str, run_id: str, error: str) -> bool:
    """Record that ``job``'s query failed; False (and a log line) if even that is impossible.

    Called while handling the query's own error: it never raises, so that error is the one the
    caller reports (a full disk must not replace "query X failed" by "cannot write a row").
    """
    row = {
        "job": job,
        "run_id": run_id,
        "failed_at": datetime.now(timezone.utc),
        "error": error[:4000],
    }
    try:
        ops_tables.append(cfg, "stream_failures", [row])
    except Exception as exc:  # noqa: BLE001 - see the docstring
        LOG.error(
            "could not record the failure of %s in ops/stream_failures (%s); the "
            "failure itself: %s",
            job,
            exc,
            error[:500],
        )
        return False
    return True
