"""Every table of the lake, with its schema: created empty when missing.

Readers downstream of the streams (dbt above all) can then run before a stream has ever
ingested anything: a table with no rows reconciles to zero rows, where a missing one would fail.
A gold table's schema is the schema of its job's ``build`` applied to an empty bronze table.

Making a gold table's schema takes Spark. Each one made is kept per content of the job and of
tidemark (`remember_gold_schema`), so that a process without a JVM of its own can have the
tables made by a Spark that runs anyway: `creation_statements` gives the SQL that a shared SQL
endpoint runs for ``tidemark-dbt`` (`orchestration.recon.dbt_cli`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import time
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import types as T

from streaming_jobs.storage import ops_tables
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.runtime.ingestion import QUARANTINE_SCHEMA, bronze_schema
from streaming_jobs.storage.registry import registry, streams
from streaming_jobs.core.locations import Location, is_delta_table
from streaming_jobs.storage.lake import ROW_TRACKING, clear_unborn_log, ensure_table

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
    created += ops_tables.ensure_all(cfg)

    def gold_schema(name, spec):
        empty = [spark.createDataFrame([], bronze_schema(known[s])) for s in spec.sources]
        try:
            schema = spec.apply(*empty).schema
        except Exception as exc:  # noqa: BLE001 - any failure of the job's own code or query
            text = str(exc).strip()
            first = text.splitlines()[0].rstrip("; ") if text else type(exc).__name__
            raise GoldSchemaError(
                f"job {name} ({spec.at()}): its gold table cannot be created, "
                f"its query does not run on empty input: {first}; fix the job "
                "('tidemark check' names the problem)"
            ) from exc
        remember_gold_schema(cfg, spec, schema)
        return schema

    for layer, name, schema, properties, partition_by in _declared(gold_schema):
        try:
            ensure(layer, name, schema, properties, partition_by)
        except GoldSchemaError as exc:
            if not skip_broken:
                raise
            if str(exc) not in _REPORTED:
                _REPORTED.add(str(exc))
                LOG.error("%s", exc)
    return created


def _declared(gold_schema):
    """Each stream's and job's lake table: (layer, name, its schema, or a callable that makes
    it from (name, spec) with ``gold_schema``, its properties, its partition columns). Both
    `ensure_lake` and `creation_statements` make their tables from it."""
    for name, stream in streams().items():
        yield "bronze", name, bronze_schema(stream), ROW_TRACKING, []
        yield "quarantine", name, QUARANTINE_SCHEMA, None, []
    for name, spec in registry().items():
        make = lambda name=name, spec=spec: gold_schema(name, spec)  # noqa: E731
        yield "gold", name, make, spec.table_properties, list(spec.partition_by)


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


# -- the tables as SQL, for a Spark of another process -------------------------------------------


@functools.lru_cache(maxsize=1)
def _package_digest() -> str:
    """tidemark's own code (every module of this package): what a job's schema may depend on
    besides the job's folder."""
    digest = hashlib.sha256()
    package = Path(__file__).resolve().parents[1]
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


GOLD_SCHEMAS_KEPT_SECONDS = 7 * 24 * 3600


def _gold_schema_file(cfg: TidemarkConfig, spec) -> Path:
    """Where the gold schema of ``spec`` is kept: named by what it depends on (the job's file
    and the modules beside it, its sources' bronze schemas, its mode, Spark's version and
    tidemark's code), so that a change to any of them makes it unknown again."""
    from pyspark import __version__ as spark_version

    known = streams()
    digest = hashlib.sha256(
        f"{spec.name}|{spec.output_mode}|{spark_version}|{_package_digest()}".encode()
    )
    if spec.origin and Path(spec.origin).is_file():
        for path in sorted({Path(spec.origin), *Path(spec.origin).parent.glob("*.py")}):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    for name in spec.sources:
        digest.update(bronze_schema(known[name]).json().encode())
    checks = cfg.spark.jars_cache.parent / "checks" / "gold-schema"
    return checks / f"{spec.name}-{digest.hexdigest()[:24]}.json"


def remember_gold_schema(cfg: TidemarkConfig, spec, schema: T.StructType) -> None:
    """Keep ``schema`` as the gold schema of ``spec`` (written whole, then renamed); the job's
    schemas for code a week old are let go. A cache that cannot be written (a read-only
    checkout) only means `tidemark-dbt` makes the table with Spark: logged, never raised."""
    path = _gold_schema_file(cfg, spec)
    if path.exists():
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.partial")
        partial.write_text(schema.json())
        partial.replace(path)
    except OSError as exc:
        LOG.info("job %s: its gold schema was not kept in %s: %s", spec.name, path.parent, exc)
        return
    for old in path.parent.glob(f"{spec.name}-*.json"):
        try:
            if time.time() - old.stat().st_mtime > GOLD_SCHEMAS_KEPT_SECONDS:
                old.unlink()
        except OSError:
            pass  # another process let it go first


def known_gold_schema(cfg: TidemarkConfig, spec) -> T.StructType | None:
    """The gold schema a Spark made for ``spec`` as it is now, or None."""
    try:
        return T.StructType.fromJson(json.loads(_gold_schema_file(cfg, spec).read_text()))
    except (OSError, ValueError, KeyError):
        return None


def _name(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _text(value) -> str:
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def _sql_type(kind: T.DataType) -> str:
    """``kind`` as Spark SQL writes a column's type, every nested field name quoted."""
    if isinstance(kind, T.StructType):
        return "struct<" + ", ".join(_column(f, ":") for f in kind.fields) + ">"
    if isinstance(kind, T.ArrayType):
        return f"array<{_sql_type(kind.elementType)}>"
    if isinstance(kind, T.MapType):
        return f"map<{_sql_type(kind.keyType)}, {_sql_type(kind.valueType)}>"
    return kind.simpleString()


def _column(field: T.StructField, between: str = " ") -> str:
    return (
        _name(field.name)
        + between
        + _sql_type(field.dataType)
        + ("" if field.nullable else " NOT NULL")
    )


def create_statement(
    path, schema: T.StructType, properties: dict | None = None, partition_by=()
) -> str:
    """The SQL that creates the empty Delta table ``ensure_table`` would at ``path``."""
    sql = (
        f"CREATE TABLE IF NOT EXISTS delta.{_name(Location.of(path).spark)} "
        f"({', '.join(_column(f) for f in schema.fields)}) USING delta"
    )
    if partition_by:
        sql += f" PARTITIONED BY ({', '.join(_name(c) for c in partition_by)})"
    if properties:
        pairs = (f"{_text(k)} = {_text(v)}" for k, v in properties.items())
        sql += f" TBLPROPERTIES ({', '.join(pairs)})"
    return sql


def creation_statements(cfg: TidemarkConfig, absent: list[str]) -> list[str] | None:
    """The SQL creating the ``absent`` tables (as `missing` names them) as `ensure_lake` would;
    None when one of them needs Spark here: a gold schema no Spark has made for the job as it
    is now, or an ops table (those are made without Spark, `ops_tables.ensure_all`)."""
    wanted, statements = set(absent), []
    for layer, name, schema, properties, partition_by in _declared(
        lambda _, spec: known_gold_schema(cfg, spec)
    ):
        if f"{layer}/{name}" not in wanted:
            continue
        schema = schema() if callable(schema) else schema
        if schema is None:
            return None
        path = cfg.paths.table(layer, name)
        statements.append(create_statement(path, schema, properties, partition_by))
    if len(statements) < len(wanted):  # an ops table, or a name nothing declares
        return None
    for item in absent:
        clear_unborn_log(cfg.paths.table(*item.split("/", 1)))
    return statements
