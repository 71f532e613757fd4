"""Recovery, savepoints and retention as Dagster jobs: ``recovery_job``, ``savepoint_job`` and
``maintenance_job``.

``recovery_job`` is what `checkpoint_health_sensor` requests for a broken checkpoint: it
restores the job's latest savepoint and runs the job incrementally so it catches up from the
savepoint's batch. With ``repair: true`` it sets the job's torn newest commits file aside
instead (`tidemark repair JOB`), and the job runs that batch again; with ``restore: false``
alone it only re-runs the job (a failed query whose checkpoint is sound). Its runs carry the
checkpoint tags of the job and its sources. Named ``bronze_<stream>``, it repairs that
ingestion's checkpoint (`tidemark repair`: its torn newest file set aside, only when bronze and
quarantine show it is safe) and runs the ingestion until it has caught up.

``savepoint_job`` takes a savepoint of every job: itself for a job nobody runs, and by asking
the continuous run that hosts a job otherwise (`savepoints.request`). It needs no JVM and no
checkpoint tag, so it runs next to a continuous run instead of queueing behind it.

``rebuild_job`` changes the version that serves a job without stopping it
(`streaming_jobs.operations.shadow`): the job's current code is run over all of bronze beside
the live version, then swapped in (by the continuous run that hosts the job, between two
batches, when one does); with ``rollback: true`` the version the last swap replaced is put
back. Each swap is a row of ``ops/job_changes`` and the gold asset's materialization metadata.
Like ``savepoint_job`` it takes no checkpoint tag: it runs next to a continuous run.

``maintenance_job`` runs retention (`streaming_jobs.operations.retention`): compaction,
VACUUM, ops pruning, the landing archive. It also runs next to a continuous run: nothing it
does conflicts with an append, and a MERGE-written gold table is compacted only while its job
is not running. Its steps are the run's metadata; a failed step fails the run after the
others have run.
"""

import dagster as dg
from pydantic import Field

from streaming_jobs.core.checkpoints import query_name
from streaming_jobs.operations import retention, savepoints, shadow
from streaming_jobs.operations.rebuild import code_after_rollback
from streaming_jobs.storage.repairs import ingestion_stream, repair
from streaming_jobs.storage.registry import get_job, registry
from streaming_jobs.runtime.runner import run_bronze, run_job

from orchestration.lib import keys
from orchestration.recon.gate import Gate, NotSwapped, rebuild_and_swap
from orchestration.lib.metadata import run_metadata
from orchestration.lib.resources import TidemarkResource, TidemarkSparkResource


class RecoverConfig(dg.Config):
    job: str = Field(
        description="the streaming job to recover, or an ingestion (bronze_<stream>) to repair"
    )
    restore: bool = Field(True, description="a job: restore its latest savepoint first")
    repair: bool = Field(
        False, description="a job: set its checkpoint's torn newest commits file aside first"
    )


@dg.op(
    out={},
    description="Restore a job's latest savepoint (or repair a job's or an ingestion's "
    "checkpoint), then run it until it has caught up.",
)
def recover(
    context: dg.OpExecutionContext,
    config: RecoverConfig,
    pyspark: TidemarkSparkResource,
    tidemark: TidemarkResource,
):
    cfg = tidemark.config()
    spark = pyspark.spark_session
    holder = f"Dagster run {context.run_id} (recovery)"
    stream = ingestion_stream(config.job)
    if stream is not None:
        yield _repair_ingestion(context, spark, cfg, stream, holder)
        return
    spec = get_job(config.job)
    if config.repair:
        done = repair(cfg, spec.name, holder=holder)
        context.log.info(done.said() if done else f"{spec.name}: nothing to mend")
    elif config.restore:
        point = savepoints.restore(spark, cfg, spec.name, holder=holder)
        context.log.info(
            f"{spec.name}: restored savepoint {point.path.name} (batch "
            f"{point.batch_id}, gold version {point.gold_version})"
        )
    for source in spec.sources:
        run_bronze(spark, cfg, source, holder=holder)
    metrics = run_job(spark, cfg, spec, holder=holder)
    context.log.info(
        f"{spec.name}: caught up to batch {metrics.checkpoint_batch_id} "
        f"({metrics.input_rows} rows replayed)"
    )
    how = (
        "by a repair" if config.repair else "from a savepoint" if config.restore else "by a re-run"
    )
    yield dg.AssetMaterialization(
        asset_key=keys.gold(spec.name),
        description=f"recovered {how}",
        metadata=run_metadata(metrics, str(cfg.paths.table("gold", spec.name))),
    )


def _repair_ingestion(
    context: dg.OpExecutionContext, spark, cfg, stream: str, holder: str
) -> dg.AssetMaterialization:
    """Set aside the torn file of the stream's ingestion checkpoint (refused, failing the run
    with why, when the tables show it is not safe); then ingest what is waiting."""
    done = repair(cfg, query_name(stream), holder=holder)
    context.log.info(done.said() if done else f"{query_name(stream)}: nothing to mend")
    metrics = run_bronze(spark, cfg, stream, holder=holder)
    context.log.info(
        f"{metrics.query}: caught up to batch {metrics.checkpoint_batch_id} "
        f"({metrics.input_rows} rows)"
    )
    return dg.AssetMaterialization(
        asset_key=keys.bronze(stream),
        description="recovered by a repair" if done else "caught up (nothing to mend)",
        metadata=run_metadata(metrics, str(cfg.paths.table("bronze", stream))),
    )


@dg.job(
    executor_def=dg.in_process_executor,
    description="Restore a job's latest savepoint, or repair a job's or an ingestion's torn "
    "checkpoint, and catch it up (requested by checkpoint_health_sensor).",
)
def recovery_job():
    recover()


class SavepointConfig(dg.Config):
    jobs: list[str] = Field(default_factory=list, description="default: every registered job")


@dg.op(out={}, description="Take a savepoint of every job, running or not.")
def take_savepoints(
    context: dg.OpExecutionContext, config: SavepointConfig, tidemark: TidemarkResource
):
    cfg = tidemark.config()
    names = config.jobs or list(registry())
    results = savepoints.take_all(
        cfg, names, keep=cfg.ops.savepoints_keep, holder=f"Dagster run {context.run_id} (savepoint)"
    )
    for name, result in results.items():
        if isinstance(result, savepoints.Savepoint):
            context.log.info(f"{name}: savepoint {result.path.name} (batch {result.batch_id})")
        else:
            context.log.warning(f"{name}: no savepoint this time: {result}")
    taken = [n for n, r in results.items() if isinstance(r, savepoints.Savepoint)]
    context.log.info(
        f"savepoints taken: {', '.join(taken) or 'none'}; not taken: "
        f"{', '.join(n for n in results if n not in taken) or 'none'}"
    )


@dg.job(
    executor_def=dg.in_process_executor,
    description="Savepoint every job between batches; a continuous run takes its jobs' own.",
)
def savepoint_job():
    take_savepoints()


class RebuildConfig(dg.Config):
    job: str = Field(description="the streaming job whose version changes")
    partitions: int | None = Field(
        None, description="the new version's state partitions (a rescale); default: Spark's"
    )
    rollback: bool = Field(False, description="put back the version the last swap replaced")
    skip_recon: bool = Field(
        False, description="swap the new version in without reconciling it first"
    )


def _gate_metadata(gate: Gate) -> dict:
    shown = {"recon": dg.MetadataValue.text(gate.message[:2000])}
    if gate.reconciled and gate.unexplained is not None:
        shown["recon_unexplained"] = dg.MetadataValue.int(gate.unexplained)
    return shown


@dg.op(
    out={},
    description="Build a job's current version beside the live one and swap it in, or roll "
    "back to the version the last swap replaced.",
)
def change_version(
    context: dg.OpExecutionContext,
    config: RebuildConfig,
    pyspark: TidemarkSparkResource,
    tidemark: TidemarkResource,
):
    cfg = tidemark.config()
    spec = get_job(config.job)
    holder = f"Dagster run {context.run_id} ({'rollback' if config.rollback else 'rebuild'})"
    metadata = {}
    try:
        if config.rollback:
            done = shadow.swap(lambda: pyspark.spark_session, cfg, spec.name, "rollback", holder)
            said = code_after_rollback(cfg, spec, done["to_version"])
            context.log.info(said)
            metadata["code"] = dg.MetadataValue.text(said)
        else:
            built, gate, done = rebuild_and_swap(
                pyspark.spark_session,
                cfg,
                spec,
                partitions=config.partitions,
                holder=holder,
                skip_recon=config.skip_recon,
                say=context.log.info,
            )
            if built["last_batch"] is not None:  # batches 0 .. last
                metadata["shadow_batches"] = dg.MetadataValue.int(built["last_batch"] + 1)
            metadata.update(_gate_metadata(gate))
            if done.get("unreconciled_batches") is not None:
                metadata["unreconciled_batches"] = dg.MetadataValue.int(
                    done["unreconciled_batches"]
                )
    except NotSwapped as refused:
        raise dg.Failure(
            description=f"{spec.name}: not swapped: its new version does not reconcile "
            f"({refused.gate.message}). The live version serves on; the shadow is kept. Fix "
            "the job and run again, or set skip_recon",
            metadata=_gate_metadata(refused.gate),
        ) from None
    except shadow.RebuildError as exc:
        raise dg.Failure(description=str(exc)) from None
    context.log.info(
        f"{spec.name}: {done['kind']} done, version {done['from_version']} -> "
        f"{done['to_version']} (gold version {done['gold_version']})"
    )
    metadata.update(
        {
            "change": dg.MetadataValue.text(done["kind"]),
            "from_version": dg.MetadataValue.text(done["from_version"] or "none (no live version)"),
            "to_version": dg.MetadataValue.text(str(done["to_version"])),
            "gold_version": dg.MetadataValue.int(done["gold_version"]),
            "gold_rows": dg.MetadataValue.int(done["gold_rows"]),
            "rollback": dg.MetadataValue.text(f"tidemark rollback {spec.name}"),
        }
    )
    if done.get("state_partitions") is not None:  # unknown is left out, never shown as 0
        metadata["state_partitions"] = dg.MetadataValue.int(done["state_partitions"])
    yield dg.AssetMaterialization(
        asset_key=keys.gold(spec.name),
        description=f"version {done['to_version']} swapped in ({done['kind']})",
        metadata=metadata,
    )


@dg.job(
    executor_def=dg.in_process_executor,
    description="Rebuild a job's current version beside the live one and swap it in "
    "(rollback: true puts the previous one back).",
)
def rebuild_job():
    change_version()


@dg.op(
    out={"report": dg.Out(dg.Nothing)},
    description="Compact and VACUUM the lake, prune ops history, archive ingested landing files.",
)
def maintain_lake(
    context: dg.OpExecutionContext, pyspark: TidemarkSparkResource, tidemark: TidemarkResource
):
    cfg = tidemark.config()
    report = retention.maintain(pyspark.spark_session, cfg)
    metadata = {
        "steps": dg.MetadataValue.md("\n".join(retention.table(report))),
        "seconds": dg.MetadataValue.float(round(report.seconds, 1)),
        "mb_freed": dg.MetadataValue.float(round(report.total("bytes_freed") / 1e6, 2)),
        "ops_rows_pruned": dg.MetadataValue.int(report.total("rows_removed")),
        "failed_steps": dg.MetadataValue.int(len(report.failed)),
    }
    if report.failed:
        raise dg.Failure(
            description="maintenance: "
            + "; ".join(f"{s.target}: {s.detail}" for s in report.failed)
            + ". The other steps ran; fix the cause and the next run retries these.",
            metadata=metadata,
        )
    yield dg.Output(None, "report", metadata=metadata)


@dg.job(
    executor_def=dg.in_process_executor,
    description="Retention: OPTIMIZE and VACUUM, ops pruning, landing archive "
    "(maintenance_schedule).",
)
def maintenance_job():
    maintain_lake()


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions(jobs=[recovery_job, savepoint_job, rebuild_job, maintenance_job])
