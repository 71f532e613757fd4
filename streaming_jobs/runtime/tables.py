"""Every table of the lake, with its schema: created empty when missing.

Readers downstream of the streams (dbt above all) can then run before a stream has ever
ingested anything: a table with no rows reconciles to zero rows, where a missing one would fail.
A gold table's schema is the schema of its job's ``build`` applied to an empty bronze table.
"""

from __future__ import annotations

import logging

from pyspark.sql import SparkSession

from streaming_jobs.storage import ops_tables
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.runtime.ingestion import QUARANTINE_SCHEMA, bronze_schema
from streaming_jobs.storage.registry import registry, streams
from streaming_jobs.core.locations import is_delta_table
from streaming_jobs.storage.lake import ROW_TRACKING, ensure_table

LOG = logging.getLogger(__name__)
_REPORTED: set[str] = set()  # the errors of jobs ensure_lake skipped, logged once per process


class GoldSchemaError(RuntimeError):
    """A job's gold schema cannot be derived (its query does not resolve on empty bronze)."""


def ensure_lake(
    spark: SparkSession, cfg: TidemarkConfig, *, skip_broken: bool = False
) -> list[str]:
    """Create the missing lake tables; returns the ones it created (as layer/name).

    A job whose gold schema cannot be derived raises `GoldSchemaError` naming the job and its
    file; with ``skip_broken`` (a server that serves every other table: the SQL endpoint) it is
    logged once and skipped, and its gold table stays missing."""
    paths, created = cfg.paths, []

    def ensure(layer: str, name: str, schema, properties=None, partition_by=None) -> None:
        path = paths.table(layer, name)
        # A table whose log has a commit is there: asking Spark would rebuild its state (about
        # 5 s for the whole lake, in every dbt invocation and endpoint start)
        if not is_delta_table(path):
            ensure_table(
                spark, path, schema() if callable(schema) else schema, properties, partition_by
            )
            created.append(f"{layer}/{name}")

    known = streams()
    for name, stream in known.items():
        ensure("bronze", name, bronze_schema(stream), ROW_TRACKING)
        ensure("quarantine", name, QUARANTINE_SCHEMA)
    created += ops_tables.ensure_all(cfg)

    def gold_schema(name, spec):
        empty = [spark.createDataFrame([], bronze_schema(known[s])) for s in spec.sources]
        try:
            return spec.apply(*empty).schema
        except Exception as exc:  # noqa: BLE001 - any failure of the job's own code or query
            text = str(exc).strip()
            first = text.splitlines()[0].rstrip("; ") if text else type(exc).__name__
            raise GoldSchemaError(
                f"job {name} ({spec.at()}): its gold table cannot be created, "
                f"its query does not run on empty input: {first}; fix the job "
                "('tidemark check' names the problem)"
            ) from exc

    for name, spec in registry().items():
        try:
            ensure(
                "gold",
                name,
                lambda name=name, spec=spec: gold_schema(name, spec),
                spec.table_properties,
                list(spec.partition_by),
            )
        except GoldSchemaError as exc:
            if not skip_broken:
                raise
            if str(exc) not in _REPORTED:
                _REPORTED.add(str(exc))
                LOG.error("%s", exc)
    return created


def missing(cfg: TidemarkConfig) -> list[str]:
    """The lake tables `ensure_lake` would create (files only: no JVM), as layer/name."""
    paths = cfg.paths
    wanted = [("ops", name) for name in ops_tables.SCHEMAS]
    for name in streams():
        wanted += [("bronze", name), ("quarantine", name)]
    wanted += [("gold", name) for name in registry()]
    return [
        f"{layer}/{name}" for layer, name in wanted if not is_delta_table(paths.table(layer, name))
    ]
