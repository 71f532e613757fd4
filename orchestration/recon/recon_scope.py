"""Incremental reconciliation: the first day each job's reconciliation recomputes.

A full reconciliation recomputes every job over all of bronze, so its cost grows with history.
This module decides, before dbt starts, how little of it a run can recompute and still give
the rows a full one gives (a backfill of every day).

Every run records, per job and source, the bronze version it reconciled up to (the dbt model
``recon_positions``, built after every recon model: a run that fails records nothing, and the
next one starts again from the last recorded position). The next run:

1. takes the files each source's bronze table added since then from the Delta log, and their
   earliest event time from the files' statistics (no data is read): the new events;
2. the earliest day a new event can change is the day of that time less the job's
   ``recon_lookback`` (a join's bound); it also reaches back to the first day that held
   ``window_open`` rows last time if the job's stream ran a batch since (their windows may
   have closed in it, even without new events), and for session jobs
   (``recon_chain``) to the start of every session last reconciled that ends at or after the
   earliest new event (a new click may extend or merge it);
3. passes that day as ``recon_from[job]`` (a run var, macros/run_vars.sql): the job's batch
   and recon tables replace the days from there on in one Delta commit each (materialization
   ``recon_partitions``), and the batch model reads events from that day less
   ``recon_read_back``.

A job that nothing new reached and whose stream ran no batch since (``NOTHING_NEW``) is left
out of the run: its batch and recon models and their tests (`left_out`); its tables hold
what a recomputation would give.

A job is recomputed in full (``recon_from`` null) on its first reconciliation; after its
stream was rebuilt or restored (a new checkpoint query id) or its bronze rewound; when the dbt
project or the job's parameters changed (the fingerprint); when a log version it needs is gone
or a file lacks statistics; and when ``full`` is asked for (``tidemark-dbt --full``, the
``tidemark/recon: full`` run tag): a backfill. A job with neither ``recon_partition`` nor
``recon_composed`` (keyed state, sessions, joins of your own) is recomputed in full whenever
something new reached it, and left out like the others when nothing did; your SQL jobs over
tumbling or sliding windows of one stream get a day (`streaming_jobs.storage.sql_jobs.recon_days`). A composed
job (sessions, the profile) takes the same first day, but only as a bound on its new events'
time: its batch model merges what its table holds with the events past the table's own
position (dbt's macros/compose.sql).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path

from streaming_jobs.core import locations
from streaming_jobs.core.locations import Location
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.core.delta_log import (
    StatsUnknown,
    changed_outside_its_writer,  # noqa: F401
    earliest_new_event,
    holds_no_rows,
    ingest_batch_floor,
)
from streaming_jobs.intervals import interval_seconds
from streaming_jobs.storage.registry import stream_schema
from streaming_jobs.spec import JobSpec

# recon_from when nothing new reached a job: no day is recomputed
NOTHING_NEW = "9999-12-31"


def fingerprint(project: Path, job_params: dict) -> str:
    """A hash of the dbt project's SQL and settings and of the job's parameters: a change to
    either makes the next reconciliation of the job a full one."""
    digest = hashlib.sha256(json.dumps(job_params, sort_keys=True, default=str).encode())
    for path in sorted(
        [
            *project.glob("models/**/*.sql"),
            *project.glob("macros/**/*.sql"),
            project / "dbt_project.yml",
        ]
    ):
        if path.is_file():
            digest.update(path.relative_to(project).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def positions_now(progress_rows: list[dict]) -> dict[str, dict[str, int]]:
    """Per job and source: the newest bronze version its batches have read (pure)."""
    out: dict[str, dict[str, int]] = {}
    for row in progress_rows:
        for read in row.get("source_versions") or []:
            if read.get("version_to") is None:
                continue
            sources = out.setdefault(row["job"], {})
            sources[read["source_table"]] = max(
                sources.get(read["source_table"], -1), int(read["version_to"])
            )
    return out


def last_batch(progress_rows: list[dict], job: str, query_id: str | None) -> int | None:
    """The newest batch id the job's current query (``query_id``) recorded (pure); None
    before its first."""
    ids = [
        int(r["batch_id"])
        for r in progress_rows
        if r["job"] == job and r.get("query_id") == query_id and r.get("batch_id") is not None
    ]
    return max(ids) if ids else None


def last_reconciled(rows: list[dict]) -> dict[str, dict]:
    """Per job, the positions recorded by its newest reconciliation (pure): query id,
    fingerprint, open_from (a date or None), the job's last stream batch then (None if not
    recorded) and the version per source."""
    newest: dict[str, tuple] = {}  # job -> (reconciled_at, invocation_id) of its newest run
    for row in rows:
        if row["job"] not in newest or row["reconciled_at"] > newest[row["job"]][0]:
            newest[row["job"]] = (row["reconciled_at"], row["invocation_id"])
    out: dict[str, dict] = {}
    for row in rows:
        if (row["reconciled_at"], row["invocation_id"]) != newest[row["job"]]:
            continue
        job = out.setdefault(
            row["job"],
            {
                "query_id": row["query_id"],
                "reconciled_at": row["reconciled_at"],
                "fingerprint": row["fingerprint"],
                "open_from": row["open_from"],
                "batch_id": row.get("batch_id"),
                "versions": {},
            },
        )
        job["versions"][row["source"]] = int(row["version_to"])
    return out


# Why a job must be reconciled in full this time: the Delta log's reasons (a version gone, a
# file without statistics) and this module's own.
NeedsFull = StatsUnknown


def first_day(
    spec: JobSpec,
    earliest: dt.datetime | None,
    open_from: dt.date | None,
    chain_start: dt.datetime | None,
) -> str:
    """The first day to recompute (pure): the day a new event can change, or that still held
    open rows, or that a session it extends began on."""
    days = []
    if earliest is not None:
        back = interval_seconds(spec.recon_lookback) or 0
        days.append((earliest - dt.timedelta(seconds=back)).date())
    if chain_start is not None:
        days.append(chain_start.date())
    if open_from is not None:
        # rows still open last time: a batch without new events (Spark runs one when the
        # watermark moved) may have closed and emitted them since
        days.append(open_from)
    return min(days).isoformat() if days else NOTHING_NEW


def session_start_reached(
    cfg: TidemarkConfig, job: str, earliest: dt.datetime
) -> dt.datetime | None:
    """The start of the earliest session last reconciled that ends at or after ``earliest``
    (a new click at or after it may extend or merge it), from the job's batch table."""
    from deltalake import QueryBuilder
    import pyarrow as pa

    table = locations.delta_table(cfg.paths.dbt_table("batch", f"int_{job}__batch"))
    at = earliest.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")
    rows = pa.table(
        QueryBuilder()
        .register("t", table)
        .execute(f"select min(window_start) as start from t where window_end >= '{at}'")
    ).to_pylist()
    start = rows[0]["start"] if rows else None
    if start is not None and start.tzinfo is None:
        start = start.replace(tzinfo=dt.timezone.utc)
    return start


def batch_ran_since(last: dict, batch_now: int | None) -> bool:
    """Whether the job's stream may have run a batch since its last reconciliation (pure):
    unknown (a position recorded before the batch was) counts as yes."""
    return last.get("batch_id") is None or batch_now is None or batch_now != last["batch_id"]


def _aware(moment: dt.datetime) -> dt.datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.timezone.utc)


def job_scope(
    cfg: TidemarkConfig,
    spec: JobSpec,
    last: dict | None,
    now: dict[str, int],
    query_id: str | None,
    print_: str,
    batch_now: int | None = None,
) -> str:
    """The first day to recompute for one job, or raise NeedsFull."""
    if last is None:
        raise NeedsFull("first reconciliation")
    if last["query_id"] != query_id:
        raise NeedsFull("its stream was rebuilt or restored since the last reconciliation")
    if last["fingerprint"] != print_:
        raise NeedsFull("the dbt project or the job's parameters changed")
    for kind in ("batch", "recon"):
        name = f"int_{spec.name}__batch" if kind == "batch" else f"recon_{spec.name}"
        if not locations.is_dir(Location.of(cfg.paths.dbt_table(kind, name)) / "_delta_log"):
            raise NeedsFull(f"table {kind}.{name} is missing")
    # rows deleted or changed in gold by hand are no new event: only a full run sees them
    if last.get("reconciled_at") is not None:
        changed = changed_outside_its_writer(
            cfg.paths.table("gold", spec.name), _aware(last["reconciled_at"])
        )
        if changed:
            raise NeedsFull(f"its gold table changed outside its stream ({changed})")
    earliest = None
    for source in spec.sources:
        after = last["versions"].get(source)
        upto = now.get(source, -1)
        if after is None or upto < after:
            raise NeedsFull(f"bronze {source} was rebuilt since the last reconciliation")
        column = stream_schema(source).event_time
        found = earliest_new_event(cfg.paths.table("bronze", source), after, upto, column)
        if found is not None and (earliest is None or found < earliest):
            earliest = found
    chain = (
        session_start_reached(cfg, spec.name, earliest)
        if spec.recon_chain and earliest is not None
        else None
    )
    # windows open last time can only have closed in a batch the stream ran since
    open_from = last["open_from"] if batch_ran_since(last, batch_now) else None
    if isinstance(open_from, dt.datetime):
        open_from = open_from.date()
    return first_day(spec, earliest, open_from, chain)


def recon_scope_vars(
    cfg: TidemarkConfig,
    jobs: dict[str, JobSpec],
    job_params: dict,
    project: Path,
    progress_rows: list[dict],
    full: bool = False,
    partitions_from: str | None = None,
) -> dict:
    """``recon_from`` (job -> first day, or None: in full) and ``recon_positions`` (the rows
    ``recon_positions`` records when the run succeeds), with the reason per job.
    ``progress_rows``: the progress table's rows as of the version pinned for the invocation
    (`orchestration.recon.dbt_vars.read_progress`; its positions are the run's).
    ``partitions_from``: a day every dated job recomputes from at least (the first of the partitions a run was asked
    for, `orchestration.recon.recon_partitions`)."""
    from streaming_jobs.core.checkpoints import query_id

    now = positions_now(progress_rows)
    recorded = last_reconciled(read_positions(cfg))
    scope, reasons, positions = {}, {}, []
    empty: dict[str, bool] = {}  # per source: its bronze holds no row yet
    for name, spec in jobs.items():
        current = query_id(cfg.paths.checkpoint(name))
        print_ = fingerprint(project, job_params.get(name, {}))
        last = recorded.get(name)
        batch_now = last_batch(progress_rows, name, current)
        for source in spec.sources:
            position = {
                "job": name,
                "source": source,
                "version_to": now.get(name, {}).get(source, -1),
                "query_id": current or "",
                "fingerprint": print_,
                "batch_id": batch_now,
            }
            if source not in empty:
                empty[source] = holds_no_rows(cfg.paths.table("bronze", source))
            if empty[source]:
                # nothing to replay: the lateness counts of an empty stream are all 0
                position["bronze_empty"] = True
            if (
                not full
                and last
                and last["query_id"] == (current or "")
                and last["fingerprint"] == print_
                and source in last["versions"]
            ):
                # the lateness replay counts only rows past last time's position: the files
                # before it need not be read (int_late_events_by_source)
                after = last["versions"][source]
                floor = ingest_batch_floor(cfg.paths.table("bronze", source), after)
                if floor is not None:
                    position["replay_floor"] = {"after": after, "ingest_batch_id": floor}
            positions.append(position)
        params = job_params.get(name, {})
        by_day = "recon_partition" in params or params.get("recon_composed")
        if full:
            scope[name], reasons[name] = None, "in full: a backfill was asked for"
            continue
        try:
            scope[name] = job_scope(
                cfg, spec, last, now.get(name, {}), current or "", print_, batch_now
            )
            if not by_day and scope[name] != NOTHING_NEW:
                # something new reached a job without days: all of it again
                scope[name], reasons[name] = None, f"in full: {whole_reason(spec)}"
                continue
            reasons[name] = (
                "nothing new since the last reconciliation: left out of this run"
                if scope[name] == NOTHING_NEW
                else f"from {scope[name]}"
            )
            if partitions_from is not None and partitions_from < scope[name]:
                scope[name] = partitions_from
                reasons[name] = f"from {partitions_from}: the run's partitions"
        except NeedsFull as why:
            scope[name], reasons[name] = None, f"in full: {why}"
    return {
        "recon_from": scope,
        "recon_positions": positions,
        "recon_reasons": reasons,
        "recon_full": full,
    }


def whole_reason(spec: JobSpec) -> str:
    """Why a job without days is recomputed whole when something new reached it."""
    if spec.recon_partition is None and "window_end" not in spec.keys and not spec.window_end:
        return "no window to reconcile by day (keyed state, or rows per key)"
    if spec.joins:
        return "a join (a partner event can change a window before its own day)"
    return "session windows, or windows tidemark cannot measure (declare recon_partition)"


def left_out(variables: dict) -> list[str]:
    """The models a run leaves out (pure, from what `recon_scope_vars` returned and the jobs'
    vars): the batch and recon models of every job nothing reached (``NOTHING_NEW``), and the
    staging view of a stream whose every job is such (bronze has nothing new for any, so the
    view and its tests would say what they said; the lateness replay keeps those jobs' counts
    without reading it). dbt leaves their tests out with them; the shared models (lateness,
    positions, summary) still run."""
    scope = variables.get("recon_from", {})
    idle = {job for job, day in scope.items() if day == NOTHING_NEW}
    readers: dict[str, set[str]] = {}
    for job, params in variables.get("jobs", {}).items():
        for source in params.get("sources", {}):
            readers.setdefault(source, set()).add(job)
    models = [m for job in sorted(idle) for m in (f"int_{job}__batch", f"recon_{job}")]
    return models + [
        f"stg_{source}" for source, jobs in sorted(readers.items()) if jobs and jobs <= idle
    ]


def read_positions(cfg: TidemarkConfig) -> list[dict]:
    """The rows of recon_positions ([] before the first reconciliation)."""
    path = cfg.paths.dbt_table("recon", "recon_positions")
    if not locations.is_dir(Location.of(path) / "_delta_log"):
        return []

    return locations.delta_table(path).to_pyarrow_table().to_pylist()
