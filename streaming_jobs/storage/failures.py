"""Queries that ended with an error, recorded in ``ops/stream_failures`` for the health sensor,
and the hold that stops a query failing on the same batch again and again.

Each failure records the batch the query was running (planned in ``offsets/``, not committed),
or none when it failed outside a batch (starting, planning, reading its source). A query whose
last `HOLD_AFTER` failures are all the same batch is **held**: runs refuse to start it (a
continuous run leaves it out and runs the others), the health sensor raises ``job_held`` naming
the batch, the error and the fix, and its gold keeps its last good commit. ``tidemark release
QUERY`` ends the hold (a row of its own in ``ops/stream_failures``): the next run tries the batch
again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timezone

from streaming_jobs.storage import ops_tables
from streaming_jobs.core.checkpoints import (
    batch_input,
    last_committed_batch,
    last_planned_batch,
)
from streaming_jobs.core.config import TidemarkConfig

LOG = logging.getLogger(__name__)
# failures of one batch in a row that hold its query
HOLD_AFTER = 3
# the run_id of the row `release` writes: a hold ends there
RELEASED = "released by hand"


def failing_batch(cfg: TidemarkConfig, query: str) -> int | None:
    """The batch ``query`` was running when it failed: planned, not committed (None when it
    failed outside a batch)."""
    checkpoint = cfg.paths.checkpoint(query)
    planned = last_planned_batch(checkpoint)
    committed = last_committed_batch(checkpoint)
    if planned is None or (committed is not None and committed >= planned):
        return None
    return planned


@dataclass(frozen=True)
class Hold:
    """A query held on a batch it failed `HOLD_AFTER` times in a row."""

    query: str
    batch_id: int
    failures: int
    error: str
    last_failed_at: datetime
    last_committed: int | None
    reads: tuple[str, ...] = ()  # what the batch reads (`batch_input`): the row is in there
    located: str | None = None  # the row it fails on, or why none was found (`locate`)

    def message(self) -> str:
        good = (
            f"its output keeps its last good commit (batch {self.last_committed})"
            if self.last_committed is not None
            else "it has committed no batch yet"
        )
        return (
            f"{self.query}: held on batch {self.batch_id}, which failed {self.failures} times "
            f"in a row (the last at {self.last_failed_at:%Y-%m-%d %H:%M:%S} UTC): "
            f"{self.error[:500]}. No run starts it again until you release it, and {good}. "
            + (f"Batch {self.batch_id} reads {'; '.join(self.reads)}. " if self.reads else "")
            + (f"{self.located}. " if self.located else "")
            + "Fix the cause the error names (a row the job cannot handle: change the job so "
            "it does, for example try_cast or a condition that leaves such rows out"
            + (
                ""
                if self.query.startswith("bronze_")
                else f", and `tidemark accept {self.query}` if the check before a batch "
                "refuses that change"
            )
            + "; a setting; the disk), then `tidemark release "
            f"{self.query}`: the next run tries batch {self.batch_id} again. To start the job "
            f"over instead: `tidemark rebuild {self.query}` (its fixed version built beside "
            "this one, swapped in once it has caught up), or `tidemark rebuild "
            f"{self.query} --from-scratch --force`."
        )


def failure_rows(cfg: TidemarkConfig, query: str) -> list[dict]:
    """The query's rows of ``ops/stream_failures``, releases included, oldest first."""
    if not ops_tables.exists(cfg, "stream_failures"):
        return []
    rows = ops_tables.read(cfg, "stream_failures", where=f"job = {ops_tables.literal(query)}")
    return sorted(rows, key=lambda r: r["failed_at"])


def failures_of(cfg: TidemarkConfig, query: str) -> list[dict]:
    """The failures recorded for ``query``, oldest first (releases left out)."""
    return [r for r in failure_rows(cfg, query) if r["run_id"] != RELEASED]


def held(cfg: TidemarkConfig, query: str, rows: list[dict] | None = None) -> Hold | None:
    """The hold on ``query``, or None: its last `HOLD_AFTER` failures since the latest release
    were all the same batch, and that batch is still not committed. ``rows``: the query's rows
    of ``ops/stream_failures``, oldest first, when the caller has read them (`failure_rows`)."""
    rows = failure_rows(cfg, query) if rows is None else rows
    released = max((i for i, r in enumerate(rows) if r["run_id"] == RELEASED), default=-1)
    tail = rows[released + 1 :][-HOLD_AFTER:]
    if len(tail) < HOLD_AFTER:
        return None
    batches = {r.get("batch_id") for r in tail}
    if len(batches) != 1 or None in batches:
        return None
    batch = batches.pop()
    committed = last_committed_batch(cfg.paths.checkpoint(query))
    if committed is not None and committed >= batch:
        return None
    last = tail[-1]
    reads = tuple(_named(cfg, r) for r in batch_input(cfg.paths.checkpoint(query), batch))
    return Hold(
        query,
        batch,
        len(tail),
        last["error"] or "",
        last["failed_at"],
        committed,
        reads,
        last.get("located"),
    )


def would_hold(cfg: TidemarkConfig, query: str) -> int | None:
    """The batch ``query`` failed on, if recording this failure holds it: its previous
    `HOLD_AFTER` - 1 failures since the latest release were that same batch. None otherwise
    (or when it failed outside a batch)."""
    batch = failing_batch(cfg, query)
    if batch is None:
        return None
    rows = failure_rows(cfg, query)
    released = max((i for i, r in enumerate(rows) if r["run_id"] == RELEASED), default=-1)
    tail = rows[released + 1 :][-(HOLD_AFTER - 1) :]
    if len(tail) == HOLD_AFTER - 1 and all(r.get("batch_id") == batch for r in tail):
        return batch
    return None


def _named(cfg: TidemarkConfig, said: str) -> str:
    """``said`` with a bronze table's Delta id replaced by its name (a job reads bronze)."""
    if not said.startswith("Delta table "):
        return said
    from deltalake.exceptions import TableNotFoundError

    from streaming_jobs.core import locations
    from streaming_jobs.storage.registry import streams

    table_id = said.split()[2].rstrip(":")
    for stream in streams():
        bronze = cfg.paths.table("bronze", stream)
        try:
            if locations.delta_table(bronze).metadata().id == table_id:
                return said.replace(f"Delta table {table_id}", f"bronze/{stream}", 1)
        except TableNotFoundError:
            continue
    return said


def release(cfg: TidemarkConfig, query: str) -> Hold | None:
    """End the hold on ``query`` (returns it; None if it was not held: nothing is written)."""
    hold = held(cfg, query)
    if hold is not None:
        row = {
            "job": query,
            "run_id": RELEASED,
            "failed_at": datetime.now(timezone.utc),
            "error": f"released by hand (tidemark release) from batch {hold.batch_id}",
            "batch_id": None,
        }
        ops_tables.append(cfg, "stream_failures", [row])
    return hold


def record_failure(
    cfg: TidemarkConfig, job: str, run_id: str, error: str, located: str | None = None
) -> bool:
    """Record that ``job``'s query failed; False (and a log line) if even that is impossible.
    ``located``: for the failure that holds it, the row its batch fails on (`would_hold`).

    Called while handling the query's own error: it never raises, so that error is the one the
    caller reports (a full disk must not replace "query X failed" by "cannot write a row").
    """
    try:
        batch = failing_batch(cfg, job)
    except OSError:
        batch = None
    row = {
        "job": job,
        "run_id": run_id,
        "failed_at": datetime.now(timezone.utc),
        "error": error[:4000],
        "batch_id": batch,
        "located": located,
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
