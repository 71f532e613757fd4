"""Rescale: change the number of state partitions of a stopped job (Spark 4.2, offline).

Spark 4.2's streaming checkpoint manager rewrites every stateful operator's state into
``partitions`` partitions and records that as one new batch in the checkpoint (it reads no
input); the next run continues from it. tidemark wraps it with the checkpoint lock (the job
must not be running) and a savepoint first, so a failed or regretted rescale is one `restore`
away.

Measured here: Spark 4.2.0's ``repartition`` returns without rewriting anything (no new batch,
the same partitions; the upstream work is SPARK-54345). `rescale` checks the result and says so
instead of reporting success; the checkpoint is left as it was.

Limits (Spark's, stated by its API as experimental in 4.2): RocksDB state store only (tidemark's
default); the query must be stopped; a job whose checkpoint has no stateful operator has nothing
to rescale; asking for the current partition count is an error. Shuffle partitions of stateless
stages follow ``TIDEMARK_SHUFFLE_PARTITIONS`` as before.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from streaming_jobs.core import locations
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.core.locations import Location
from streaming_jobs.storage.lake import spark_path
from streaming_jobs.operations import savepoints
from streaming_jobs.core.checkpoints import checkpoint_lock


class RescaleError(RuntimeError):
    """The rescale could not run; the message says why and what to do."""


def state_partitions(spark: SparkSession, cfg: TidemarkConfig, job: str) -> set[int]:
    checkpoint = cfg.paths.checkpoint(job)
    if not locations.is_dir(Location.of(checkpoint) / "state"):
        return set()
    return {
        r.numPartitions
        for r in spark.read.format("state-metadata")
        .load(spark_path(checkpoint))
        .select("numPartitions")
        .collect()
    }


def rescale(
    spark: SparkSession, cfg: TidemarkConfig, job: str, partitions: int, holder: str = "a rescale"
) -> savepoints.Savepoint:
    """Repartition the job's state to ``partitions``; returns the savepoint taken first."""
    if partitions < 1:
        raise RescaleError(f"rescale {job}: partitions must be at least 1, not {partitions}")
    current = state_partitions(spark, cfg, job)
    if not current:
        raise RescaleError(
            f"rescale {job}: its checkpoint {cfg.paths.checkpoint(job)} holds no "
            "state (never ran, or a stateless job): nothing to rescale"
        )
    if current == {partitions}:
        raise RescaleError(f"rescale {job}: its state already has {partitions} partitions")
    point = savepoints.take(cfg, job, keep=cfg.ops.savepoints_keep + 1, holder=holder)
    with checkpoint_lock(cfg.paths.checkpoint(job), holder):
        try:
            spark._streamingCheckpointManager.repartition(  # noqa: SLF001 - Spark 4.2's API
                spark_path(cfg.paths.checkpoint(job)), partitions
            )
        except Exception as exc:  # noqa: BLE001 - re-raised with what to do
            raise RescaleError(
                f"rescale {job} to {partitions} partitions failed: {exc}. The checkpoint may be "
                f"partly rewritten: run 'tidemark restore {job}' to put back savepoint "
                f"{point.path.name} (taken just before)."
            ) from exc
    after = state_partitions(spark, cfg, job)
    if after != {partitions}:
        raise RescaleError(
            f"rescale {job}: Spark {spark.version}'s offline repartitioning returned without "
            f"rewriting the state (still {sorted(after)} partitions, no new batch in the "
            "checkpoint). The checkpoint is unchanged and the job runs on as before; the "
            "feature is still being completed upstream (SPARK-54345). To change the partition "
            f"count today: 'tidemark rebuild {job} --partitions {partitions}' builds the job from "
            "bronze beside the live one with that many state partitions and swaps it in."
        )
    return point
