"""Every reconciliation run and its outcome (``ops/recon_runs``), and the status read from it.

dbt's ``build`` skips ``recon_summary`` when a blocking check fails, so the summary table alone
cannot tell a failed run from no run. tidemark-dbt therefore records every build that reached a
recon model here, from dbt's own results, whatever they say: per job, whether its recon table
was built and passed its checks, its class counts (read from the table it just built), and each
failed check with its row count. A run that failed before any recon model ran gets one row with
no job.

`status` reads it back for ``tidemark recon``, ``tidemark summary``, ``tidemark run``/``live``,
``ops/overview`` and the ``recon_summary`` asset: each job's latest run and the latest run as a
whole. A reconciliation is clean only when the latest run passed and every job's latest row
passed with 0 unexplained rows; "no reconciliation has run yet" is said only when the table has
no row at all.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime, timezone

from streaming_jobs.core import locations
from streaming_jobs.storage import ops_tables
from streaming_jobs.core.config import TidemarkConfig

TABLE = "recon_runs"
PASSED, FAILED, ERROR, NOT_BUILT = "passed", "failed", "error", "not_built"
# dbt's statuses of a node that went wrong (a model's error, a test's fail or error)
BAD = {"error", "fail", "runtime error"}


def _status(result) -> str:
    return str(getattr(result.status, "value", result.status)).lower()


def _job_of_model(unique_id: str, jobs: set[str]) -> str | None:
    name = unique_id.rsplit(".", 1)[-1]
    job = name.removeprefix("recon_")
    return job if name.startswith("recon_") and job in jobs else None


def _severity(node) -> str:
    return str(getattr(getattr(node, "config", None), "severity", "error") or "error").lower()


def _late_events(cfg: TidemarkConfig) -> dict[str, dict]:
    """int_late_events per job (the late events the batch side replayed and the stream reported)."""
    from deltalake.exceptions import TableNotFoundError

    path = cfg.paths.dbt_table("batch", "int_late_events")
    try:
        rows = locations.delta_table(path).to_pyarrow_table().to_pylist()
    except (TableNotFoundError, OSError):
        return {}
    return {r["job"]: r for r in rows}


def version_notes(cfg: TidemarkConfig, jobs) -> dict[str, str]:
    """Per job whose gold was written by another version than its code's now (a rollback whose
    code was not put back, a change not run yet): what its reconciliation then means. The
    models hold the code's definition only, so that is what gold is compared with."""
    from streaming_jobs.core.versions import holds_current, read_record, version_of
    from streaming_jobs.runtime.changes import current_parts
    from streaming_jobs.storage.registry import registry, streams

    specs, out = registry(), {}
    for job in sorted(jobs):
        record = read_record(cfg.paths.checkpoint(job)) if job in specs else None
        if not record or not record.get("version"):
            continue
        code = version_of(current_parts(specs[job]))
        if not holds_current(record, specs[job], streams()):
            out[job] = (
                f"gold holds version {record['version']} of the job (its checkpoint's) and the "
                f"code is version {code}: reconciled against the code's definition, so rows the "
                f"two versions define differently count as unexplained. Put version "
                f"{record['version']}'s code back, or rebuild the job (tidemark rebuild {job})"
            )
    return out


def rows_from_results(
    cfg: TidemarkConfig,
    results: list,
    jobs: set[str],
    run_key: str,
    started_at: datetime,
    finished_at: datetime,
    dagster_run_id: str | None = None,
) -> list[dict]:
    """The ``recon_runs`` rows of one dbt invocation, from its node results ([] when it built
    no recon model: a staging-only or test-only invocation is not a reconciliation)."""
    from orchestration.recon.recon_report import UNEXPLAINED, recon_counts

    models = {
        job: r
        for r in results
        if getattr(r.node, "resource_type", None) is not None
        and str(getattr(r.node.resource_type, "value", r.node.resource_type)) == "model"
        and (job := _job_of_model(r.node.unique_id, jobs))
    }
    if not models:
        return []
    failed_checks: dict[str, list[str]] = {job: [] for job in models}
    failures = []  # every node that went wrong, for the message of a job whose model was skipped
    for r in results:
        status = _status(r)
        if status not in BAD:
            continue
        node = r.node
        name = node.name  # (a test's unique id ends in a hash)
        failures.append(f"{name} ({status})")
        attached = getattr(node, "attached_node", None) or ""
        job = _job_of_model(attached, jobs) if attached else None
        if job in failed_checks and _severity(node) == "error":
            count = getattr(r, "failures", None)
            failed_checks[job].append(
                f"{name}: {count:,} rows"
                if status == "fail" and count is not None
                else f"{name}: {status} ({r.message})"
            )
    late = _late_events(cfg)
    notes = version_notes(cfg, models)
    rows = []
    for job, result in sorted(models.items()):
        row = {
            "run_key": run_key,
            "job": job,
            "started_at": started_at,
            "finished_at": finished_at,
            "dagster_run_id": dagster_run_id,
            "failed_checks": failed_checks[job],
        }
        if _status(result) == "success":
            counts = recon_counts(cfg, job)
            row.update(
                status=FAILED if failed_checks[job] else PASSED,
                rows_compared=sum(counts.values()),
                unexplained_rows=sum(counts[c] for c in UNEXPLAINED),
                class_rows=counts,
            )
            if job in notes:
                row["message"] = notes[job]
            replay = late.get(job)
            if replay:
                row.update(
                    late_events_replayed=replay.get("late_events_replayed"),
                    late_events_reported=replay.get("late_events_reported"),
                    late_events_report_lost=replay.get("late_events_report_lost"),
                )
        else:
            why = (
                ("an upstream node failed: " + ", ".join(failures[:5]))
                if failures
                else (result.message or _status(result))
            )
            row.update(status=NOT_BUILT, message=f"recon_{job} {_status(result)}: {why}")
        rows.append(row)
    run_status = PASSED if all(r["status"] == PASSED for r in rows) and not failures else FAILED
    for row in rows:
        row["run_status"] = run_status
    return rows


def record(cfg: TidemarkConfig, rows: list[dict]) -> None:
    ops_tables.append(cfg, TABLE, rows)


def record_error(
    cfg: TidemarkConfig,
    run_key: str,
    started_at: datetime,
    message: str,
    dagster_run_id: str | None = None,
) -> None:
    """A reconciliation that failed before dbt ran any node (a compile error, a lost endpoint)."""
    record(
        cfg,
        [
            {
                "run_key": run_key,
                "job": None,
                "started_at": started_at,
                "finished_at": datetime.now(timezone.utc),
                "run_status": ERROR,
                "status": ERROR,
                "message": message[:2000],
                "dagster_run_id": dagster_run_id,
            }
        ],
    )


def record_outcome(
    cfg: TidemarkConfig, result, started_at: datetime, lost: str | None = None
) -> None:
    """Record what a ``dbt build`` (its `dbtRunnerResult`, or None when tidemark-dbt failed
    before dbt ran) reconciled, if anything; ``lost``: why the build no longer held the data
    root's reconciliation lock at its end (another build may have replaced its tables), which
    makes its outcome an error. Never raises: a failure to record is printed, and the exit code
    of the build stays what it was."""
    import sys

    try:
        _record_invocation(cfg, result, started_at, lost)
    except Exception as exc:  # noqa: BLE001 - the build's own outcome must not be masked
        print(
            f"tidemark-dbt: this reconciliation's outcome could not be recorded in "
            f"{ops_tables.path(cfg, TABLE)} ({exc}); `tidemark recon` will show the run "
            "before it. Fix the cause (disk full? permissions?) and reconcile again.",
            file=sys.stderr,
        )


def _record_invocation(cfg: TidemarkConfig, result, started_at: datetime, lost: str | None) -> None:
    import sys

    from orchestration.recon.dbt_models import reconciled_jobs

    dagster_run_id = os.environ.get("TIDEMARK_DAGSTER_RUN_ID")
    if result is None:
        error = sys.exc_info()[1]
        record_error(
            cfg,
            _invocation_id(),
            started_at,
            f"tidemark-dbt stopped before dbt ran: {error!r}",
            dagster_run_id,
        )
        return
    executed = getattr(result, "result", None)
    results = list(getattr(executed, "results", None) or [])
    run_key = _invocation_id()
    if not results and not result.success:
        why = result.exception or "dbt could not parse or compile the project (see its log)"
        record_error(
            cfg, run_key, started_at, f"dbt failed before running any model: {why}", dagster_run_id
        )
        return
    rows = rows_from_results(
        cfg,
        results,
        set(reconciled_jobs()),
        run_key,
        started_at,
        datetime.now(timezone.utc),
        dagster_run_id,
    )
    failures = [f"dbt: {result.exception}"] if result.exception is not None else []
    if lost:
        lost = f"this build lost the data root's reconciliation lock while it ran: {lost}"
        if not rows:
            record_error(cfg, run_key, started_at, lost, dagster_run_id)
            return
        failures.append(lost)
    for why in failures:
        for row in rows:
            row["run_status"] = ERROR
            row["message"] = (row.get("message") or "") + f" ({why})"
    record(cfg, rows)


def _invocation_id() -> str:
    try:
        from dbt_common.invocation import get_invocation_id

        return get_invocation_id()
    except ImportError:  # pragma: no cover - dbt-core always has it
        import uuid

        return str(uuid.uuid4())


# -- reading ---------------------------------------------------------------------------------


@dataclass
class ReconStatus:
    """The latest reconciliation: each job's latest row and the latest run's rows."""

    jobs: dict[str, dict] = field(default_factory=dict)
    latest_run: list[dict] = field(default_factory=list)

    @property
    def ran(self) -> bool:
        return bool(self.latest_run)

    @property
    def compared(self) -> int:
        """Rows compared by each job's latest reconciliation (a job not reconciled compared
        none)."""
        return sum(r["rows_compared"] or 0 for r in self.jobs.values())

    @property
    def uncounted(self) -> list[str]:
        """Why the unexplained rows cannot be counted now ([] when they can): a job whose latest
        run did not reconcile it, or a latest run that failed before reconciling any job (each
        job's count is then from an earlier run, and the data may have moved since)."""
        out = [job for job, r in sorted(self.jobs.items()) if r["unexplained_rows"] is None]
        if any(r["job"] is None for r in self.latest_run):
            out.append("the latest run, which failed before reconciling any job")
        return out

    @property
    def counted_unexplained(self) -> int:
        """The unexplained rows of the jobs that were counted: all there are only when
        ``uncounted`` is empty, a lower bound otherwise."""
        return sum(r["unexplained_rows"] or 0 for r in self.jobs.values())

    @property
    def unexplained(self) -> int | None:
        """Unexplained rows over every job's latest reconciliation, or None when they cannot be
        counted (``uncounted``): never a 0 that leaves out a job that was not reconciled."""
        return None if self.uncounted else self.counted_unexplained

    @property
    def run_status(self) -> str | None:
        return self.latest_run[0]["run_status"] if self.latest_run else None

    @property
    def finished_at(self) -> datetime | None:
        return self.latest_run[0]["finished_at"] if self.latest_run else None

    def problems(self) -> list[str]:
        """What keeps the reconciliation from being clean, a line each ([] when it is clean)."""
        if not self.ran:
            return ["no reconciliation has run yet"]
        out = []
        for row in self.latest_run:
            if row["job"] is None:
                out.append(
                    f"the latest reconciliation ({row['finished_at']:%Y-%m-%d %H:%M:%S}) "
                    f"failed before reconciling any job: {row['message']}"
                )
        for job, row in sorted(self.jobs.items()):
            if row["status"] == NOT_BUILT:
                out.append(
                    f"{job}: not reconciled in the run of {row['finished_at']:%H:%M:%S} "
                    f"({row['message']})"
                )
            elif row["status"] != PASSED or row["unexplained_rows"]:
                checks = "; ".join(row["failed_checks"] or []) or "no failed check recorded"
                counted = row["unexplained_rows"]
                said = (
                    "unexplained rows not counted"
                    if counted is None
                    else f"{counted:,} unexplained rows"
                )
                out.append(
                    f"{job}: {said} (failed checks: {checks})"
                    + (f". {row['message']}" if row.get("message") else "")
                )
        return out

    @property
    def clean(self) -> bool:
        return not self.problems()


def status(cfg: TidemarkConfig) -> ReconStatus:
    """Each job's latest ``recon_runs`` row, and the rows of the newest run (delta-rs, no JVM)."""
    rows = ops_tables.read(cfg, TABLE)
    for row in rows:
        row["class_rows"] = dict(row["class_rows"]) if row["class_rows"] else None
    out = ReconStatus()
    if not rows:
        return out
    newest = max(rows, key=lambda r: r["finished_at"])["run_key"]
    out.latest_run = [r for r in rows if r["run_key"] == newest]
    for row in sorted(rows, key=lambda r: r["finished_at"]):
        if row["job"] is not None:
            out.jobs[row["job"]] = row
    return out
