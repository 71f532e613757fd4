"""A job's version: a fingerprint of everything that defines its results, and the record of it
a checkpoint keeps.

The version hashes the job's **parts** (`version_parts`):

- its code: a SQL job's query; a Python job's functions and classes (``build`` and what it
  defines beside it), and the source of every module of ``streaming_jobs.stateful`` it uses;
- its spec: sources, keys, measures, event time, watermark, TTL, output mode, parameters,
  ``reads`` and partition columns;
- its sources' schemas: fields and types, event time, deduplication key.

Not in it: the description, state thresholds, tolerances, expectations and the recon settings,
which change no row of gold.

Dagster shows the version as the gold asset's ``code_version``. Each run writes the version,
its parts and the query's state shape (`streaming_jobs.runtime.changes`) to the checkpoint's
``tidemark_version.json`` before its first batch; each progress row names the version that ran
it. The next run compares its own with that record before any batch.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import sys
from types import ModuleType

from streaming_jobs.core import locations
from streaming_jobs.core.locations import Where
from streaming_jobs.schemas import StreamSchema
from streaming_jobs.spec import JobSpec

RECORD = "tidemark_version.json"
# beside it: the last refusal of a new version (`streaming_jobs.runtime.changes`), until a run
# passes the check
REFUSED = "tidemark_refused.json"
STATEFUL_PACKAGE = "streaming_jobs.stateful"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _stateful_modules(module: ModuleType, used: set[str] | None = None) -> set[str]:
    """The modules of ``streaming_jobs.stateful`` that ``module`` uses, and those they use."""
    used = set() if used is None else used
    for value in vars(module).values():
        owner = (
            value
            if isinstance(value, ModuleType)
            else sys.modules.get(getattr(value, "__module__", None) or "")
        )
        name = getattr(owner, "__name__", "")
        if name.startswith(STATEFUL_PACKAGE) and name not in used:
            used.add(name)
            _stateful_modules(owner, used)
    return used


def code_parts(spec: JobSpec) -> dict[str, str]:
    """A hash per piece of the job's code: ``query`` for a SQL job; for a Python job each
    function and class its module defines (by name) and each stateful module it uses."""
    sql = getattr(spec.build, "sql", None)
    if isinstance(sql, str):
        return {"query": _digest(sql.strip())}
    module = sys.modules.get(getattr(spec.build, "__module__", "") or "")
    if module is None:  # a build made at run time (a test's lambda): its own source
        try:
            return {"build": _digest(inspect.getsource(spec.build))}
        except (OSError, TypeError):
            return {"build": _digest(repr(spec.build))}
    parts = {}
    for name, value in sorted(vars(module).items()):
        if (inspect.isfunction(value) or inspect.isclass(value)) and getattr(
            value, "__module__", None
        ) == module.__name__:
            try:
                parts[name] = _digest(inspect.getsource(value))
            except (OSError, TypeError):
                parts[name] = _digest(repr(value))
    for used in sorted(_stateful_modules(module) - {module.__name__}):
        parts[used] = _digest(inspect.getsource(sys.modules[used]))
    return parts


def _stream(schema: StreamSchema) -> dict:
    return {
        "fields": [[f.name, f.dtype.simpleString()] for f in schema.fields],
        "event_time": schema.event_time,
        "key": list(schema.dedup_key),
    }


def version_parts(spec: JobSpec, streams: dict[str, StreamSchema]) -> dict:
    """Everything that defines the job's results, each part comparable on its own."""
    return {
        "code": code_parts(spec),
        "sources": {s: _stream(streams[s]) for s in spec.sources if s in streams},
        "keys": list(spec.keys),
        "measures": list(spec.measures),
        "event_time": spec.event_time,
        "watermark": spec.state.watermark,
        "ttl": spec.state.ttl,
        "output_mode": spec.output_mode,
        "params": json.loads(json.dumps(spec.params, sort_keys=True, default=repr)),
        "reads": spec.reads,
        "partition_by": list(spec.partition_by),
    }


def version_of(parts: dict) -> str:
    """The version of a job with these parts: 12 hex digits."""
    return _digest(json.dumps(parts, sort_keys=True))


def job_version(spec: JobSpec, streams: dict[str, StreamSchema]) -> str:
    return version_of(version_parts(spec, streams))


def read_record(checkpoint: Where) -> dict | None:
    """The version record a checkpoint keeps (None: none yet, or unreadable)."""
    try:
        return json.loads(locations.read_text(locations.Location.of(checkpoint) / RECORD))
    except (FileNotFoundError, ValueError):
        return None


def write_record(checkpoint: Where, record: dict) -> None:
    text = json.dumps(record, indent=1, sort_keys=True)
    locations.write_bytes(locations.Location.of(checkpoint) / RECORD, text.encode())
