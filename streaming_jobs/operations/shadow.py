"""Rebuild a job beside the live one, swap it in, and roll it back.

`build` runs the job's current version over all of bronze into a shadow: a checkpoint and a
gold table of its own under ``rebuilds/<job>/shadow/``, the query named ``<job>@rebuild`` (its
ops rows carry that name). The live version keeps serving meanwhile, and keeps running if a
continuous run hosts it. A shadow cut short resumes from its last batch; one built by another
version of the job (or for another partition count) is discarded and started again. The same
code recorded under an earlier digest is the same version (`built_by`).

`swap_locked` puts the shadow in place of the live version, holding the live checkpoint's lock;
a continuous run that hosts the job does it between two batches, asked by `swap` (a request it
answers). The shadow first reads what bronze gained since it was built, so it has read at least
what the live version had; then the swap runs in stages a crash cannot leave half done
(`streaming_jobs.storage.swaps`), the live version kept for a rollback.

`rollback_locked` is the same swap with the previous version as the candidate: its checkpoint
copy, and the gold table as of the version it left (Delta time travel: until retention's VACUUM
removes those files). The version it replaces becomes the previous one, so a second rollback
rolls forward again. The job's code is the user's: after a rollback the code must be the
previous version's again, or the check before a batch refuses to run it and says what differs.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from contextlib import contextmanager
from datetime import datetime, timezone

from pyspark.sql import SparkSession

from streaming_jobs.core import locations, requests
from streaming_jobs.core.checkpoints import (
    checkpoint_lock,
    is_running,
    last_committed_batch,
    last_planned_batch,
    query_id,
    takes_savepoint_requests,
)
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.core.delta_log import commit_versions, latest_version, sink_app_id, txn_of
from streaming_jobs.core.locations import Location
from streaming_jobs.core.versions import (
    holds_current,
    read_record,
    version_of,
    write_record,
)
from streaming_jobs.runtime.changes import clear_said, current_parts, new_record, source_schemas
from streaming_jobs.runtime.gold import (
    RANDOM_PREFIXES,
    Place,
    gold_query,
    gold_writer,
    sink_version_of,
)
from streaming_jobs.runtime.progress import forget_lineage, progress_log, restore_lost_progress
from streaming_jobs.spec import JobSpec
from streaming_jobs.storage import restores, swaps
from streaming_jobs.storage.failures import record_failure
from streaming_jobs.storage.lake import spark_path
from streaming_jobs.storage.restores import write_json
from streaming_jobs.storage.swaps import (
    PREVIOUS,
    SHADOW,
    folder,
    now,
    read_json,
)

LOG = logging.getLogger(__name__)


class RebuildError(RuntimeError):
    """A rebuild, swap or rollback cannot go on; the message says why and what to do. The
    live version is left serving as it was."""


def shadow_place(cfg: TidemarkConfig, job: str) -> Place:
    seen = cfg.with_shadow(job).paths
    return Place(f"{job}{SHADOW}", seen.checkpoint(job), seen.table("gold", job))


def shadow_info(cfg: TidemarkConfig, job: str) -> dict | None:
    """The shadow being built for ``job`` (its version, partitions, start), or None."""
    return read_json(folder(cfg, job) / "shadow" / "shadow.json")


def built_by(cfg: TidemarkConfig, spec: JobSpec, info: dict, version: str) -> bool:
    """Whether the shadow ``info`` describes was built by ``version`` of ``spec``: the same
    version, or its checkpoint's record holds the same code and spec under another digest (a
    record from an earlier tidemark, `streaming_jobs.core.versions.holds_current`)."""
    if info.get("version") == version:
        return True
    record = read_record(shadow_place(cfg, spec.name).checkpoint)
    return holds_current(record, spec, source_schemas(spec))


def previous_info(cfg: TidemarkConfig, job: str) -> dict | None:
    """The version kept for a rollback of ``job`` (version, gold version, query id), or None."""
    return read_json(folder(cfg, job) / "previous" / "previous.json")


@contextmanager
def _shuffle_partitions(spark: SparkSession, partitions: int | None):
    """Spark's shuffle partitions for a query's first batch: a new checkpoint's state takes that
    many partitions for good (a later batch reads the count from the checkpoint)."""
    if not partitions:
        yield
        return
    before = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    try:
        yield
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", before)


def build(
    spark: SparkSession,
    cfg: TidemarkConfig,
    spec: JobSpec,
    partitions: int | None = None,
    holder: str = "a rebuild",
) -> dict:
    """Run ``spec`` (the job's current code) over everything bronze holds now into its shadow;
    returns the shadow's state. Raises `RebuildError` when the new version fails (the live
    version is untouched; the shadow resumes from its last batch next time)."""
    from streaming_jobs.runtime.runner import query_failure

    job, place = spec.name, shadow_place(cfg, spec.name)
    home = folder(cfg, job) / "shadow"
    version = version_of(current_parts(spec))
    with checkpoint_lock(place.checkpoint, holder):
        info = read_json(home / "shadow.json")
        if info is not None and (
            not built_by(cfg, spec, info, version)
            or (partitions and info.get("partitions") != partitions)
        ):
            LOG.info("rebuild %s: discarding the shadow of version %s", job, info.get("version"))
            locations.delete_tree(home)
            info = None
        if last_planned_batch(place.checkpoint) is None:
            forget_lineage(cfg, place.name)  # rows of a shadow that is gone
        else:  # the rows a killed rebuild did not flush, from the shadow's checkpoint
            restore_lost_progress(cfg, spec, place)
        if info is None or info["version"] != version:  # new, or the same code's new digest
            info = {"started": now(), **(info or {}), "job": job, "version": version}
            info.setdefault("partitions", partitions)
            write_json(home / "shadow.json", info)
        log = progress_log(spark)
        with _shuffle_partitions(spark, partitions):
            query = gold_writer(spark, cfg, spec, place).trigger(availableNow=True).start()
        run_id = str(query.runId)
        try:
            query.awaitTermination()
        except Exception as exc:  # noqa: BLE001 - re-raised with what to do
            reason, _ = query_failure(exc, cfg)
            record_failure(cfg, place.name, run_id, reason)
            raise RebuildError(
                f"rebuild of job {job}: its new version {version} failed on bronze in the "
                f"shadow ({place.checkpoint}): {reason}. The live version serves on, "
                f"untouched. Fix the job, then run `tidemark rebuild {job}` again"
            ) from exc
        finally:
            log.wait_terminated(run_id)
            log.flush(cfg, log.take(run_id), sink_version_of(cfg, spec, place.target), spec)
    return {
        **info,
        "last_batch": last_committed_batch(place.checkpoint),
        "gold_version": latest_version(place.target),
    }


def _marker(table, app_id: str) -> int | None:
    """The newest batch ``app_id`` committed to ``table`` (its newest ``txn`` action)."""
    for version in reversed(commit_versions(table)):
        found = txn_of(table, version, app_id)
        if found is not None:
            return found
    return None


def _live(cfg: TidemarkConfig, job: str) -> dict:
    checkpoint = cfg.paths.checkpoint(job)
    return {
        "live_qid": query_id(checkpoint),
        "live_version": (read_record(checkpoint) or {}).get("version"),
        "live_last_batch": last_committed_batch(checkpoint),
        "live_gold_version": latest_version(cfg.paths.table("gold", job)),
    }


def swap_locked(
    spark: SparkSession,
    cfg: TidemarkConfig,
    spec: JobSpec,
    holder: str = "a rebuild",
    gate: dict | None = None,
) -> dict:
    """Swap the shadow of ``spec`` in (see the module doc); the caller holds the live
    checkpoint's lock. ``gate``: what the shadow's reconciliation said (recorded with the
    swap). Returns what `finish` did."""
    job = spec.name
    swaps.finish_pending(lambda: spark, cfg, job)
    restores.finish_pending(lambda: spark, cfg, job)
    place = shadow_place(cfg, job)
    info = shadow_info(cfg, job)
    if info is None or last_committed_batch(place.checkpoint) is None:
        raise RebuildError(
            f"job {job}: no shadow has been built to swap in; `tidemark rebuild {job}` builds "
            "one and swaps it"
        )
    version = version_of(current_parts(spec))
    if not built_by(cfg, spec, info, version):
        raise RebuildError(
            f"job {job}: its code changed since its shadow was built (shadow: version "
            f"{info['version']}, the code now: {version}); nothing was swapped. Run "
            f"`tidemark rebuild {job}` again to build the current version"
        )
    caught = build(spark, cfg, spec, info.get("partitions"), holder)  # bronze's newest rows
    reconciled_to = (gate or {}).get("shadow_batch")
    source_qid = query_id(place.checkpoint)
    app = sink_app_id(spec, source_qid)
    marker = _marker(place.target, app)
    if marker is None:
        raise RebuildError(
            f"job {job}: its shadow has committed nothing to {place.target} yet (bronze holds "
            "no row?); nothing was swapped"
        )
    plan = {
        "kind": "rebuild",
        "job": job,
        "stamp": datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ"),
        "planned_at": now(),
        "source": str(folder(cfg, job) / "shadow"),
        "source_qid": source_qid,
        "source_version": version,
        "source_gold": str(place.target),
        "source_gold_version": latest_version(place.target),
        "marker_app": app,
        "marker_version": marker,
        "incoming": place.name,
        "partitions": info.get("partitions"),
        # the table properties the new version's gold needs (`gold_writer` sets the same)
        "properties": {**spec.table_properties, **(RANDOM_PREFIXES if spec.partition_by else {})},
        "rows_done": [],
        "gate": gate,
        # batches after the one the gate reconciled: the next reconciliation covers them
        "unreconciled_batches": None
        if reconciled_to is None
        else caught["last_batch"] - reconciled_to,
        **_live(cfg, job),
    }
    return swaps.finish(spark, cfg, swaps.write_plan(cfg, plan))


def rollback_locked(spark: SparkSession, cfg: TidemarkConfig, job: str) -> dict:
    """Swap the previous version of ``job`` back in (see the module doc); the caller holds the
    live checkpoint's lock."""
    swaps.finish_pending(lambda: spark, cfg, job)
    restores.finish_pending(lambda: spark, cfg, job)
    kept = previous_info(cfg, job)
    if kept is None:
        raise RebuildError(
            f"job {job}: no previous version is kept, so there is nothing to roll back to (a "
            "swap keeps the version it replaces; restore a savepoint instead: `tidemark "
            f"restore {job}`)"
        )
    gold = cfg.paths.table("gold", job)
    try:  # its files may be gone (VACUUM after the table's retention)
        spark.read.format("delta").option("versionAsOf", kept["gold_version"]).load(
            spark_path(gold)
        ).limit(1).collect()
    except Exception as exc:  # noqa: BLE001 - said with what it means
        raise RebuildError(
            f"job {job}: gold version {kept['gold_version']}, which the previous version left, "
            f"cannot be read any more ({str(exc)[:300]}): retention removed its files. Nothing "
            f"was changed; rebuild the version you want instead (`tidemark rebuild {job}`)"
        ) from exc
    home = folder(cfg, job)
    incoming = home / "incoming"
    locations.delete_tree(incoming)
    locations.copy_tree(home / "previous" / "checkpoint", incoming / "checkpoint")
    plan = {
        "kind": "rollback",
        "job": job,
        "stamp": datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ"),
        "planned_at": now(),
        "source": str(incoming),
        "source_qid": kept["query_id"],
        "source_version": kept.get("version"),
        "source_gold": str(gold),
        "source_gold_version": kept["gold_version"],
        # the previous checkpoint's own marker is in gold already (its batches were written
        # there): this commit gets one of its own, so a repeat of it is skipped
        "marker_app": f"tidemark.swap.{job}.{uuid.uuid4().hex[:12]}",
        "marker_version": 0,
        "incoming": f"{job}{PREVIOUS}",
        "partitions": None,
        "properties": {},  # the table had them when the previous version ran
        "rows_done": [],
        **_live(cfg, job),
    }
    return swaps.finish(spark, cfg, swaps.write_plan(cfg, plan))


# -- the swap of a job a continuous run hosts: a request it answers between batches ----------


def _requests(cfg: TidemarkConfig, job: str) -> Location:
    return folder(cfg, job) / ".requests"


def request(
    cfg: TidemarkConfig, job: str, kind: str, requester: str, gate: dict | None = None
) -> str:
    """Ask the run that owns ``job``'s checkpoint to swap (``kind``: rebuild or rollback) or
    to accept the code's version."""
    return requests.ask(_requests(cfg, job), {"kind": kind, "requester": requester, "gate": gate})


def requested(cfg: TidemarkConfig, job: str) -> list[tuple[str, dict]]:
    """The swaps asked of ``job``'s owner that no one has answered yet."""
    out = []
    for request_id in requests.pending(_requests(cfg, job)):
        payload = requests.read(_requests(cfg, job), request_id)
        if payload is not None:
            out.append((request_id, payload))
    return out


def answer(cfg: TidemarkConfig, job: str, request_id: str, *, done=None, error=None) -> None:
    requests.answer(_requests(cfg, job), request_id, {"done": done, "error": error})


def accept_locked(spark, cfg: TidemarkConfig, spec) -> dict:
    """`rebuild.accept_change` by the holder of the checkpoint's lock: {kind, from_version,
    to_version}."""
    checkpoint = cfg.paths.checkpoint(spec.name)
    before = (read_record(checkpoint) or {}).get("version")
    record = new_record(spec, gold_query(spark, cfg, spec))
    write_record(checkpoint, record)
    clear_said(checkpoint)
    return {"kind": "accept", "from_version": before, "to_version": record["version"]}


def carry_out(
    spark: SparkSession,
    cfg: TidemarkConfig,
    job: str,
    kind: str,
    spec=None,
    gate: dict | None = None,
) -> dict:
    """The change ``kind`` of ``job``, by the holder of its checkpoint's lock: a swap of
    versions (rebuild, rollback), or the code's version accepted for the checkpoint (accept,
    `accept_locked`)."""
    if kind == "rollback":
        return rollback_locked(spark, cfg, job)
    from streaming_jobs.storage.registry import get_job

    if kind == "accept":
        return accept_locked(spark, cfg, spec or get_job(job))
    return swap_locked(spark, cfg, spec or get_job(job), gate=gate)


def swap(
    get_spark: Callable[[], SparkSession],
    cfg: TidemarkConfig,
    job: str,
    kind: str = "rebuild",
    holder: str = "tidemark rebuild",
    timeout_seconds: float = 900.0,
    gate: dict | None = None,
    spec=None,
) -> dict:
    """Swap now (or accept, ``kind``): by the continuous run that hosts ``job`` (asked, and
    waited for), else here under the checkpoint's lock (`CheckpointBusy` while another run owns
    it). ``get_spark`` is called only to do it here: a change the run makes starts no Spark in
    the caller. ``gate``: what the shadow's reconciliation said, recorded with the swap;
    ``spec``: the job as loaded by the caller (else loaded here)."""
    checkpoint = cfg.paths.checkpoint(job)
    if takes_savepoint_requests(checkpoint):
        request_id = request(cfg, job, kind, holder, gate)
        try:
            outcome = requests.wait(
                _requests(cfg, job), request_id, lambda: is_running(checkpoint), timeout_seconds
            )
        except TimeoutError:
            raise RebuildError(
                f"job {job}: the run that hosts it did not carry out the {kind} within "
                f"{timeout_seconds:.0f}s; the request was withdrawn and nothing was changed. "
                "Try again later"
            ) from None
        if outcome is not None:
            if outcome.get("error"):
                raise RebuildError(outcome["error"])
            return outcome["done"]
    with checkpoint_lock(checkpoint, holder):
        return carry_out(get_spark(), cfg, job, kind, spec, gate=gate)
