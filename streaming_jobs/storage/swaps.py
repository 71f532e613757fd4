"""Swapping one version of a job for another, in stages a crash cannot leave half done.

A swap puts a candidate in place of the version that serves a job: the shadow a rebuild built
beside it, or the previous version a rollback brings back
(`streaming_jobs.operations.shadow`). Three things must move together: the gold table's rows,
the checkpoint, and the job's ops rows. So a swap is a plan first,
``rebuilds/<job>/swap.json``, written whole before anything changes; every stage is
idempotent, and every run that takes the job's checkpoint lock finishes a plan it finds before
anything else (`finish_pending`):

1. keep: the live checkpoint is copied to ``rebuilds/<job>/previous/`` with the gold version
   it left (``previous.json``, written last), for a rollback;
2. gold: the gold table is overwritten with the candidate's rows in one Delta commit carrying
   the plan's idempotency marker (a rebuild's: the shadow query's last batch, so its next
   batch continues after it), so Delta skips the commit when it was made before. A reader of
   the table sees the old rows or the new ones, never a mix and never nothing;
3. checkpoint: the candidate's checkpoint is copied in place of the live one, ``metadata``
   (the query id) last;
4. rows: the job's ops rows (progress, late rows, failures, expectations) are renamed, one
   step at a time, each step recorded in the plan (a repeat of the step cut short moves
   nothing): the live version's become ``<job>@previous`` and the candidate's the job's (a
   rebuild's progress rows then point at the swap's commit);
5. done: a row in ``ops/job_changes``, the candidate's folder and the plan removed.

No stage renames a folder, so a swap is the same on a local disk and on an object store.
``TIDEMARK_FAULT_POINT=swap.<stage>`` ends the process right after that stage, as a SIGKILL
would, for the fault tests.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone

from streaming_jobs.core import locations
from streaming_jobs.core.checkpoints import query_id, relocate_state_schemas
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.core.delta_log import version_of_batch
from streaming_jobs.core.locations import Location, is_delta_table
from streaming_jobs.storage import ops_tables
from streaming_jobs.storage.lake import ensure_properties, ensure_table, spark_path
from streaming_jobs.storage.restores import fault_point, write_json

LOG = logging.getLogger(__name__)

SHADOW, PREVIOUS, SWAPPING = "@rebuild", "@previous", "@swapping"
# the ops tables whose rows belong to one version of a job (by its name)
PLAN = "swap.json"


def folder(cfg: TidemarkConfig, job: str) -> Location:
    """``rebuilds/<job>/``: the job's shadow, its previous version, a swap's plan."""
    return Location.of(cfg.paths.rebuilds) / job


def read_json(where: Location) -> dict | None:
    try:
        return json.loads(locations.read_text(where))
    except (FileNotFoundError, ValueError):
        return None


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def pending(cfg: TidemarkConfig, job: str) -> dict | None:
    """The plan of a swap of ``job`` that has not finished, if any."""
    return read_json(folder(cfg, job) / PLAN)


def write_plan(cfg: TidemarkConfig, plan: dict) -> dict:
    write_json(folder(cfg, plan["job"]) / PLAN, plan)
    fault_point("swap.planned")
    return plan


def _row_steps(plan: dict) -> list[tuple[str, str | None, str | None]]:
    """The renames of the job's ops rows, in order: (step, from name, to name); no target:
    the rows are deleted (the previous version a rebuild no longer keeps)."""
    job = plan["job"]
    if plan["kind"] == "rebuild":
        return [
            ("discard", f"{job}{PREVIOUS}", None),
            ("aside", job, f"{job}{PREVIOUS}"),
            ("in", plan["incoming"], job),
        ]
    return [
        ("aside", job, f"{job}{SWAPPING}"),
        ("in", f"{job}{PREVIOUS}", job),
        ("out", f"{job}{SWAPPING}", f"{job}{PREVIOUS}"),
    ]


def _state_partitions(spark, checkpoint) -> int | None:
    if not locations.is_dir(Location.of(checkpoint) / "state"):
        return None
    counts = {
        r.numPartitions
        for r in spark.read.format("state-metadata").load(spark_path(checkpoint)).collect()
    }
    return max(counts) if counts else None


def finish(spark, cfg: TidemarkConfig, plan: dict) -> dict:
    """Carry out (or finish) a planned swap; every stage is idempotent."""
    job = plan["job"]
    home = folder(cfg, job)
    live = Location.of(cfg.paths.checkpoint(job))
    gold = cfg.paths.table("gold", job)
    source = Location.of(plan["source"])
    previous = home / "previous"
    # keep: the live checkpoint, as it was, for a rollback
    if plan["live_qid"] is not None and query_id(live) == plan["live_qid"]:
        kept = read_json(previous / "previous.json")
        if kept is None or kept.get("query_id") != plan["live_qid"]:
            locations.delete_tree(previous)
            locations.copy_tree(live, previous / "checkpoint")
            write_json(
                previous / "previous.json",
                {
                    "job": job,
                    "version": plan["live_version"],
                    "gold_version": plan["live_gold_version"],
                    "query_id": plan["live_qid"],
                    "last_batch": plan["live_last_batch"],
                    "kept_at": now(),
                    "replaced_by": plan["source_version"],
                },
            )
    fault_point("swap.keep")
    # gold: one commit; Delta skips it if its marker says it was made
    source_gold = spark_path(plan["source_gold"])
    rows = (
        spark.read.format("delta")
        .option("versionAsOf", plan["source_gold_version"])
        .load(source_gold)
    )
    layout = spark.sql(f"DESCRIBE DETAIL delta.`{source_gold}`").first().partitionColumns
    writer = (
        rows.write.format("delta")
        .mode("overwrite")
        .option("overwriteSchema", "true")
        .option("txnAppId", plan["marker_app"])
        .option("txnVersion", plan["marker_version"])
    )
    if layout:
        writer = writer.partitionBy(*layout)
    if plan["properties"]:  # set first (a commit that changes no row)
        if is_delta_table(gold):
            ensure_properties(spark, gold, plan["properties"])
        else:
            ensure_table(spark, gold, rows.schema, plan["properties"], list(layout))
    writer.save(spark_path(gold))
    swapped = version_of_batch(gold, plan["marker_app"], plan["marker_version"])
    fault_point("swap.gold")
    # checkpoint: the candidate's copy in place of the live one, its query id last
    if query_id(live) != plan["source_qid"]:
        locations.delete_tree(live)
        locations.copy_tree(source / "checkpoint", live, skip=("metadata",))
        relocate_state_schemas(live)  # its keyed state's schema files: the live copies
        fault_point("swap.copy")
        locations.write_bytes(
            live / "metadata", locations.read_bytes(source / "checkpoint" / "metadata")
        )
    fault_point("swap.checkpoint")
    # rows: one rename at a time, each recorded (a repeat of the step cut short moves nothing)
    for step, old, new in _row_steps(plan):
        if step in plan["rows_done"]:
            continue
        for table in ops_tables.QUERY_ROWS:
            predicate = f"job = {ops_tables.literal(old)}"
            if new is None:
                ops_tables.delete(cfg, table, predicate)
                continue
            values = {"job": new}
            if table == "stream_progress" and plan["kind"] == "rebuild" and step == "in":
                values["sink_version"] = swapped  # every shadow batch is in the swap's commit
            ops_tables.update(cfg, table, values, predicate)
        plan["rows_done"].append(step)
        write_json(home / PLAN, plan)
    fault_point("swap.rows")
    change_id = f"{job}:{plan['stamp']}"
    done = {
        "change_id": change_id,
        "job": job,
        "kind": plan["kind"],
        "from_version": plan["live_version"],
        "to_version": plan["source_version"],
        "planned_at": datetime.fromisoformat(plan["planned_at"]),
        "swapped_at": datetime.now(timezone.utc),
        "gold_version": swapped,
        "previous_gold_version": plan["live_gold_version"],
        "gold_rows": spark.read.format("delta").load(spark_path(gold)).count(),
        "query_id": plan["source_qid"],
        "state_partitions": _state_partitions(spark, live),
        "recon_compared": (plan.get("gate") or {}).get("compared"),
        "recon_unexplained": (plan.get("gate") or {}).get("unexplained"),
        "unreconciled_batches": plan.get("unreconciled_batches"),
    }
    recorded = ops_tables.exists(cfg, "job_changes") and ops_tables.read(
        cfg, "job_changes", where=f"change_id = {ops_tables.literal(change_id)}", columns=["job"]
    )
    if not recorded:
        ops_tables.append(cfg, "job_changes", [done])
    locations.delete_tree(source)
    locations.delete(home / PLAN)
    LOG.info(
        "%s of %s: version %s -> %s, gold version %s",
        plan["kind"],
        job,
        plan["live_version"],
        plan["source_version"],
        swapped,
    )
    return {
        **done,
        "planned_at": plan["planned_at"],
        "swapped_at": done["swapped_at"].isoformat(timespec="seconds"),
    }


def finish_pending(spark_factory, cfg: TidemarkConfig, job: str) -> dict | None:
    """Finish a swap of ``job`` cut short (the caller holds the live checkpoint's lock);
    ``spark_factory()`` gives a session, only when one is needed."""
    plan = pending(cfg, job)
    if plan is None:
        return None
    LOG.warning(
        "job %s: finishing a %s cut short (planned %s)", job, plan["kind"], plan["planned_at"]
    )
    return finish(spark_factory(), cfg, plan)
