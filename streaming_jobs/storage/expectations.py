"""Declared expectations (`streaming_jobs.schemas.Expectation`), enforced and counted.

Where they run:

- a stream's, in bronze ingestion (`ingestion.BronzeBatchWriter`), on the rows that passed
  the schema: `split` counts each rule's failures, sends rows failing a ``quarantine`` rule to
  quarantine with the rule's reason, and raises `ExpectationFailed` (before anything of the
  batch is written) when a ``fail`` rule has a failing row;
- a job's, on its output rows inside the streaming query (`guard`): a ``fail`` rule raises in
  the task that produced the row, so the batch never commits; every rule's failures are
  counted with Spark's observed metrics and read from the batch's progress (`from_progress`).

Either way the counts land in ``ops/expectations``, one row per (query, checkpoint identity,
batch, rule): a replayed batch overwrites its own row, never adds one. The Dagster check
``expect_<name>`` on the stream's bronze asset or the job's gold asset reports them.

A row fails a rule when the predicate is false or null.
"""

from __future__ import annotations

from datetime import datetime, timezone

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from streaming_jobs.storage import ops_tables
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.schemas import Expectation

OBSERVATION = "tidemark_expectations"
CHECKED = "rows_checked"


class ExpectationFailed(RuntimeError):
    """A ``fail`` expectation had a failing row: the batch was not committed."""


def fails(e: Expectation) -> Column:
    """True for a row that fails ``e`` (its rule is false or null)."""
    return ~F.coalesce(F.expr(e.rule).cast("boolean"), F.lit(False))


def failure_message(owner: str, e: Expectation, failed: int | None, sample: str) -> str:
    count = f"{failed:,} rows" if failed is not None else "a row"
    return (
        f"{owner}: expectation {e.name} ({e.rule}) is 'fail' and {count} of the batch "
        f"failed it, e.g. {sample}; nothing of the batch was committed. Fix the data at "
        f"its source (or the rule, or make it warn/quarantine), then run again"
    )


def resolve(frame: DataFrame, owner: str, expectations: tuple[Expectation, ...]) -> None:
    """Check that every rule is a predicate over ``frame``'s columns (nothing is read); raises
    ValueError naming the rule and the columns."""
    for e in expectations:
        try:
            frame.select(fails(e)).schema  # noqa: B018 - resolving is the check
        except Exception as exc:  # noqa: BLE001 - Spark's analysis errors have many types
            first = str(exc).strip().splitlines()[0][:300]
            raise ValueError(
                f"{owner}: expectation {e.name} ({e.rule}) is not a predicate over "
                f"its columns ({', '.join(frame.columns)}): {first}"
            ) from None


def counts(rows: DataFrame, expectations: tuple[Expectation, ...]) -> dict[str, int]:
    """Rows checked and, per rule, rows failing it: one pass."""
    if not expectations:
        return {}
    aggregates = [F.count(F.lit(1)).alias(CHECKED)] + [
        F.count_if(fails(e)).alias(e.name) for e in expectations
    ]
    row = rows.agg(*aggregates).first()
    return {k: int(row[k] or 0) for k in [CHECKED, *(e.name for e in expectations)]}


def split(
    rows: DataFrame,
    owner: str,
    expectations: tuple[Expectation, ...],
) -> tuple[DataFrame, DataFrame | None, dict[str, int]]:
    """(rows kept, rows quarantined with a ``_reason`` column or None, counts).

    Raises `ExpectationFailed` with a sample row when a ``fail`` rule has failures."""
    found = counts(rows, expectations)
    for e in expectations:
        if e.action == "fail" and found.get(e.name):
            sample = rows.where(fails(e)).select(F.to_json(F.struct("*"))).first()[0]
            raise ExpectationFailed(failure_message(owner, e, found[e.name], sample))
    quarantining = [e for e in expectations if e.action == "quarantine" and found.get(e.name)]
    if not quarantining:
        return rows, None, found
    reason = F.lit(None).cast("string")
    for e in reversed(quarantining):  # the first rule a row fails is its reason
        reason = F.when(fails(e), F.lit(e.reason)).otherwise(reason)
    marked = rows.withColumn("_reason", reason)
    return (
        marked.where(F.col("_reason").isNull()).drop("_reason"),
        marked.where(F.col("_reason").isNotNull()),
        found,
    )


def guard(
    output: DataFrame, owner: str, expectations: tuple[Expectation, ...], observe: bool = True
) -> DataFrame:
    """``output`` with the expectations enforced inside the streaming query: a row failing a
    ``fail`` rule raises (the batch does not commit), and every rule's failures are observed
    per batch (`from_progress` reads them)."""
    if not expectations:
        return output
    columns = output.columns
    for e in expectations:
        if e.action == "fail":
            sample = F.to_json(F.struct(*[F.col(c) for c in columns]))
            error = F.raise_error(
                F.concat(
                    F.lit(
                        f"{owner}: expectation {e.name} ({e.rule}) is 'fail' and a row of the "
                        "batch failed it, e.g. "
                    ),
                    sample,
                    F.lit(
                        "; nothing of the batch was committed. Fix the data at its source (or "
                        "the rule, or make it warn), then run again"
                    ),
                )
            )
            output = output.where(F.coalesce(F.when(fails(e), error), F.lit(True)))
    if not observe:
        return output
    return output.observe(
        OBSERVATION,
        F.count(F.lit(1)).alias(CHECKED),
        *[F.count_if(fails(e)).alias(e.name) for e in expectations],
    )


def result_rows(
    query: str,
    query_id: str | None,
    batch_id: int,
    expectations: tuple[Expectation, ...],
    found: dict[str, int],
) -> list[dict]:
    now = datetime.now(timezone.utc)
    return [
        {
            "result_id": f"{query}:{query_id}:{batch_id}:{e.name}",
            "job": query,
            "rule": e.name,
            "predicate": e.rule,
            "action": e.action,
            "query_id": query_id,
            "batch_id": batch_id,
            "rows_checked": found.get(CHECKED, 0),
            "rows_failed": found.get(e.name, 0),
            "recorded_at": now,
        }
        for e in expectations
    ]


def from_progress(progress_rows: list[dict], expectations: tuple[Expectation, ...]) -> list[dict]:
    """The expectation rows of a job's progress rows (their observed metrics)."""
    import json

    out = []
    for row in progress_rows:
        metrics = json.loads(row.get("progress_json") or "{}").get("observedMetrics") or {}
        found = metrics.get(OBSERVATION)
        if found is not None and row.get("batch_id") is not None:
            out += result_rows(
                row["job"],
                row.get("query_id"),
                row["batch_id"],
                expectations,
                {k: int(v or 0) for k, v in found.items()},
            )
    return out


def record(cfg: TidemarkConfig, rows: list[dict]) -> None:
    """Upsert the rows into ``ops/expectations`` (a replayed batch replaces its own rows)."""
    if rows:
        ops_tables.upsert(cfg, "expectations", rows, key="result_id")


def latest(cfg: TidemarkConfig, query: str, limit: int = 50) -> dict[str, list[dict]]:
    """Per rule, its last ``limit`` rows of the query, oldest first."""
    rows = ops_tables.read(cfg, "expectations", where=f"job = {ops_tables.literal(query)}")
    out: dict[str, list[dict]] = {}
    for row in sorted(rows, key=lambda r: (r["recorded_at"], r["batch_id"])):
        out.setdefault(row["rule"], []).append(row)
    return {rule: rows[-limit:] for rule, rows in out.items()}
