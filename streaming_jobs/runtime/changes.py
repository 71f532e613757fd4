"""A changed job, checked before any batch: does its new version fit the state its checkpoint
holds?

Spark refuses some changes to a stateful query with an error to decode, and accepts others
that silently mix old state with new logic (a window length, a key, a TTL). So before a job's
query starts on a checkpoint with committed batches, tidemark compares the job's version with
the one the checkpoint recorded (`streaming_jobs.core.versions`). When it changed, it compares
the **state shape** of the new query with the recorded one: for each stateful operator of the
plan (an aggregation, a deduplication, a stream-stream join, keyed state), its kind, key,
state and the plan below it, and the watermarks.

- Safe (the query runs on, and the new version is recorded): the stateful part of the plan is
  unchanged. A change after the last stateful operator (a projection, a filter on its output,
  a renamed or computed output column the gold table already has), the description,
  thresholds, expectations and recon settings.
- Unsafe (refused before any batch; the job stays as it was and keeps its gold): what changed,
  why, and the command that rebuilds the job. Each class is in `UNSAFE`.

`tidemark check` reports the same finding without running anything or recording.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from datetime import datetime, timezone

from pyspark.sql import DataFrame

from streaming_jobs.core import locations
from streaming_jobs.core.checkpoints import last_committed_batch
from streaming_jobs.core.locations import Location
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.core.versions import (
    REFUSED,
    code_parts,
    holds_current,
    job_source,
    read_record,
    unchanged_pieces,
    version_of,
    version_parts,
    write_record,
)
from streaming_jobs.runtime.plans import seq, streaming_nodes
from streaming_jobs.spec import JobSpec
from streaming_jobs.storage.registry import stream_schema

LOG = logging.getLogger("tidemark.changes")

# the plan nodes that keep state in a streaming query
STATEFUL = (
    "Aggregate",
    "Deduplicate",
    "DeduplicateWithinWatermark",
    "Join",
    "FlatMapGroupsWithState",
    "FlatMapGroupsInPandasWithState",
    "TransformWithState",
    "TransformWithStateInPySpark",
    "TransformWithStateInPandas",
    "Limit",
    "GlobalLimit",
)

# why each class of change is unsafe
UNSAFE = {
    "operators": (
        "the checkpoint's state belongs to the old operators: Spark would refuse it, or read "
        "one operator's state as another's"
    ),
    "key": (
        "state is stored by key: rows under the new key would never meet the state kept "
        "under the old one"
    ),
    "state": (
        "the state holds what the old aggregates or keyed state computed, and the new ones "
        "would go on from it (Spark refuses a changed state schema, and accepts a changed "
        "expression)"
    ),
    "window": (
        "the windows open in state were built with the old definition and would be finished "
        "as if built with the new one"
    ),
    "watermark": (
        "rows the old watermark dropped as late stay dropped, and state kept for the old "
        "delay is evicted by the new one: gold would mix two lateness rules"
    ),
    "ttl": "keys in state expire under the old TTL while new ones use the new: gold mixes both",
    "input": (
        "rows entering the state would be computed differently from those already in it: "
        "gold would mix both definitions in one window or key"
    ),
    "code": "the keyed state's Python code changed: it would read state the old code wrote",
    "columns": "the gold table holds the old columns, and the sink refuses the new ones",
    "gold_key": "the MERGE would match gold rows by a key they were not written by",
    "output_mode": "an append job's and an update job's state and commits differ",
    "partition_by": "the gold table is partitioned by the old columns",
}


class UnsafeChange(RuntimeError):
    """A job's new version does not fit its checkpoint's state: refused before any batch."""


@dataclass(frozen=True)
class Change:
    what: str  # a class of `UNSAFE`, or "safe: <part>"
    detail: str  # what changed, before and after

    @property
    def unsafe(self) -> bool:
        return self.what in UNSAFE


# -- the state shape of a query -----------------------------------------------------------------


_IDS = re.compile(r"#\d+L?|-T\d+ms")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_HASH = re.compile(r"@[0-9a-f]{4,}")


def _clean(text: str) -> str:
    return _HASH.sub("", _UUID.sub("", _IDS.sub("", text))).strip()


def _render(node) -> str:
    """One plan node, free of what differs between two plans of the same query (expression
    ids, a watermark's id, object hashes, the source's path)."""
    kind = node.nodeName()
    if "Relation" in kind and node.children().isEmpty():
        names = [a.name() for a in seq(node.output())]
        return f"source({', '.join(names)})"
    if kind == "EventTimeWatermark":
        return f"EventTimeWatermark {node.eventTime().name()}"
    return _clean(node.simpleString(10_000))


def _lines(node, depth: int = 0) -> list[str]:
    out = ["  " * depth + _render(node)]
    for child in seq(node.children()):
        out += _lines(child, depth + 1)
    return out


def _operators(node, found: list) -> None:
    """The plan's stateful operators, leaves first (a join only of two streams)."""
    streaming: list = []
    streaming_nodes(node, streaming)
    found += [
        n
        for n in streaming
        if n.nodeName() in STATEFUL
        and (n.nodeName() != "Join" or all(c.isStreaming() for c in seq(n.children())))
    ]


def _aggregates(expression) -> bool:
    """Whether ``expression`` computes an aggregate (what an aggregation keeps in state)."""
    return expression.nodeName() == "AggregateExpression" or any(
        _aggregates(c) for c in seq(expression.children())
    )


def _key_and_state(node) -> tuple[str, str]:
    kind = node.nodeName()
    if kind == "Aggregate":
        grouping = [_clean(e.toString()) for e in seq(node.groupingExpressions())]
        functions = [
            _clean(e.toString()) for e in seq(node.aggregateExpressions()) if _aggregates(e)
        ]
        return ", ".join(grouping), ", ".join(functions)
    if kind.startswith("Deduplicate"):
        return ", ".join(_clean(e.toString()) for e in seq(node.keys())), ""
    if kind == "Join":
        return _clean(node.simpleString(10_000)), ""
    if kind == "FlatMapGroupsInPandasWithState":
        keys = ", ".join(_clean(e.toString()) for e in seq(node.groupingAttributes()))
        return keys, str(node.stateType().simpleString())
    if "WithState" in kind:
        try:
            keys = ", ".join(_clean(e.toString()) for e in seq(node.groupingAttributes()))
        except Exception:  # noqa: BLE001 - a variant without them: its whole line
            keys = _render(node)
        return keys, ""
    return _render(node), ""


def _watermarks(node, found: list) -> None:
    for child in seq(node.children()):
        _watermarks(child, found)
    if node.nodeName() == "EventTimeWatermark":
        found.append(f"{node.eventTime().name()}: {node.delay().toString()}")


def state_shape(frame: DataFrame) -> dict:
    """The stateful part of a query's plan: its operators (bottom up), each with its kind, key,
    state and the plan below it; its watermarks; its output columns."""
    plan = frame._jdf.queryExecution().analyzed()
    nodes: list = []
    _operators(plan, nodes)
    operators = []
    for node in nodes:
        key, state = _key_and_state(node)
        below = [line for child in seq(node.children()) for line in _lines(child)]
        operators.append({"kind": node.nodeName(), "key": key, "state": state, "input": below})
    watermarks: list = []
    _watermarks(plan, watermarks)
    return {
        "operators": operators,
        "watermarks": watermarks,
        "columns": [f"{f.name} {f.dataType.simpleString()}" for f in frame.schema.fields],
        "python": [line for op in operators for line in op["input"] if "UDF" in line]
        + [op["key"] for op in operators if "WithState" in op["kind"]],
    }


# -- comparing two records ----------------------------------------------------------------------


_MICROS = re.compile(r"\b(\d{4,})\b")
_INTERVAL = re.compile(r"\b\d+ (?:seconds?|minutes?|hours?|days?)\b")  # a session gap


def _windows(lines: list[str]) -> list[str]:
    """The window lengths, slides and gaps in the plan below an operator: the durations
    (microseconds) in the expressions that compute a window, in words."""
    found = []
    for line in lines:
        if "precisetimestamp" not in line:
            continue
        said = [_duration(int(m)) for m in _MICROS.findall(line)] + _INTERVAL.findall(line)
        for duration in said:
            if duration not in found:
                found.append(duration)
    return found


def _duration(micros: int) -> str:
    seconds = micros / 1_000_000
    for unit, size in (("hours", 3600), ("minutes", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g} seconds"


def _diff(before, after) -> str:
    def said(value) -> str:
        text = value if isinstance(value, str) else ", ".join(map(str, value)) or "none"
        return text if len(text) <= 300 else text[:300] + "..."

    return f"was {said(before)}; now {said(after)}"


def compare(old: dict, new: dict) -> list[Change]:
    """The changes from the ``old`` record (version, parts, shape) to the ``new`` one."""
    out: list[Change] = []
    parts, was = new["parts"], old.get("parts") or {}
    shape, had = new["shape"], old.get("shape") or {}
    unreadable = shape.get("unreadable") or had.get("unreadable")
    if unreadable:  # nothing to compare the state with: refused, as the unsafe default
        return [Change("operators", f"the state shape could not be read ({unreadable})")]
    if was.get("watermark") != parts["watermark"] or had.get("watermarks") != shape["watermarks"]:
        out.append(Change("watermark", _diff(had.get("watermarks", []), shape["watermarks"])))
    if was.get("ttl") != parts["ttl"] or (was.get("params") or {}).get("ttl") != parts[
        "params"
    ].get("ttl"):
        out.append(Change("ttl", _diff(str(was.get("ttl")), str(parts["ttl"]))))
    if was.get("output_mode") != parts["output_mode"]:
        out.append(Change("output_mode", _diff(str(was.get("output_mode")), parts["output_mode"])))
    if parts["output_mode"] == "update" and was.get("keys") != parts["keys"]:
        out.append(Change("gold_key", _diff(was.get("keys") or [], parts["keys"])))
    if was.get("partition_by") != parts["partition_by"]:
        out.append(
            Change("partition_by", _diff(was.get("partition_by") or [], parts["partition_by"]))
        )
    if had.get("columns") != shape["columns"]:
        out.append(Change("columns", _diff(had.get("columns") or [], shape["columns"])))
    before, after = had.get("operators") or [], shape["operators"]
    if [o["kind"] for o in before] != [o["kind"] for o in after]:
        out.append(
            Change("operators", _diff([o["kind"] for o in before], [o["kind"] for o in after]))
        )
    else:
        for i, (b, a) in enumerate(zip(before, after)):
            name = f"operator {i + 1} ({a['kind']})"
            if b["key"] != a["key"]:
                out.append(Change("key", f"{name}: {_diff(b['key'], a['key'])}"))
            if b["state"] != a["state"]:
                out.append(Change("state", f"{name}: {_diff(b['state'], a['state'])}"))
            windows = (_windows(b["input"]), _windows(a["input"]))
            if windows[0] != windows[1]:
                out.append(Change("window", f"{name}: durations {_diff(*windows)}"))
            elif b["input"] != a["input"] and not any(c.what == "watermark" for c in out):
                changed = [line.strip() for line in a["input"] if line not in b["input"]]
                gone = [line.strip() for line in b["input"] if line not in a["input"]]
                out.append(Change("input", f"{name}: {_diff(gone, changed)}"))
    code_was, code = was.get("code") or {}, parts["code"]
    same = unchanged_pieces(old, code, new.get("texts") or {})
    for piece in sorted(set(code_was) | set(code)):
        if piece in same:
            continue
        stateful = piece.startswith("streaming_jobs.stateful") or (
            piece[:1].isupper() and shape["python"]
        )
        if stateful and not any(c.what in ("operators", "state", "key") for c in out):
            out.append(Change("code", f"{piece} changed"))
        else:
            out.append(Change("safe: code", f"{piece} changed"))
    for part in ("sources", "measures", "reads", "params"):
        if was.get(part) != parts[part]:
            out.append(Change(f"safe: {part}", _diff(str(was.get(part)), str(parts[part]))))
    return out


def _listed(unsafe: list[Change]) -> str:
    return "; ".join(f"{c.what}: {c.detail} ({UNSAFE[c.what]})" for c in unsafe)


def refusal(spec: JobSpec, old: dict, new: dict, unsafe: list[Change]) -> str:
    listed = _listed(unsafe)
    return (
        f"job {spec.name}: its version changed from {old.get('version')} to {new['version']} "
        f"in a way its checkpoint's state cannot take, so no batch ran and its gold keeps its "
        f"last commit. What changed: {listed}. To run the new version, rebuild the job from "
        f"bronze: `tidemark rebuild {spec.name}` (the new version is built beside this one, "
        "which keeps serving, and swapped in once it has caught up); "
        f"or put the job back as it was (`tidemark code {spec.name}` shows the difference, "
        "`--put-back` writes the checkpoint's version back); or, if you know the state fits "
        "the new version (a cast made try_cast for rows that never failed, say), "
        f"`tidemark accept {spec.name}`"
    )


# -- before a run ---------------------------------------------------------------------------------


def source_schemas(spec: JobSpec) -> dict:
    """The schemas of the streams ``spec`` reads, by stream name (a part of its version)."""
    return {s: stream_schema(s) for s in spec.sources}


def current_parts(spec: JobSpec) -> dict:
    return version_parts(spec, source_schemas(spec))


def new_record(spec: JobSpec, frame: DataFrame) -> dict:
    parts = current_parts(spec)
    try:
        shape = state_shape(frame)
    except Exception as exc:  # noqa: BLE001 - a plan tidemark cannot read must not stop a run
        LOG.warning("job %s: its state shape could not be read: %s", spec.name, exc)
        shape = {"unreadable": str(exc)[:300]}
    return {
        "version": version_of(parts),
        "parts": parts,
        "shape": shape,
        "texts": code_parts(spec, texts=True),
        "source": job_source(spec),
    }


def changed_since_checkpoint(cfg: TidemarkConfig, spec: JobSpec) -> bool:
    """Whether ``spec`` is not the version its checkpoint recorded (nor the same code under
    another digest, `holds_current`, which its next run records), and the checkpoint has
    committed batches (no Spark needed)."""
    checkpoint = cfg.paths.checkpoint(spec.name)
    old = read_record(checkpoint)
    return (
        old is not None
        and not holds_current(old, spec, source_schemas(spec))
        and last_committed_batch(checkpoint) is not None
    )


def assess(
    cfg: TidemarkConfig, spec: JobSpec, frame: DataFrame, checkpoint=None
) -> tuple[dict | None, dict, list[Change]]:
    """The checkpoint's record, the new one, and the changes between them (none when the
    version is the same or no batch was committed yet). Reads only. ``checkpoint``: the job's
    own unless given (a rebuild's shadow)."""
    checkpoint = checkpoint or cfg.paths.checkpoint(spec.name)
    new = new_record(spec, frame)
    old = read_record(checkpoint)
    changes = []
    if old is not None and old.get("version") != new["version"]:
        if last_committed_batch(checkpoint) is not None:
            changes = compare(old, new)
    return old, new, changes


def _say(said: Location, version: str, message: str, kind: str | None = None) -> None:
    """Say ``message`` of ``version`` in the checkpoint's ``said`` file, stamped now; the same
    said again (a continuous run retrying a job's start every minute) keeps its first time,
    when it began, and writes nothing."""
    try:
        before = json.loads(locations.read_text(said))
    except (FileNotFoundError, ValueError):
        before = {}
    if (before.get("kind"), before.get("version"), before.get("message")) == (
        kind,
        version,
        message,
    ):
        return
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    record = {"at": stamp, "version": version, "message": message}
    locations.write_bytes(said, json.dumps({**record, "kind": kind} if kind else record).encode())


def say_left_out(checkpoint, version: str, message: str) -> None:
    """For the health sensor (`job_left_out`): a continuous run left the job out, version
    ``version`` of its code having passed this check and failed at its start (``message``:
    why); said until a run passes the check again (the code changed, or the run restarted)."""
    _say(Location.of(checkpoint) / REFUSED, version, message, "left_out")


def say_waiting(checkpoint, version: str, message: str) -> None:
    """For the health sensor (`job_change_waiting`): the job's file became version
    ``version``, which a continuous run that keeps running the version before it found its
    checkpoint's state cannot take (``message``); said until the run takes a version again."""
    _say(Location.of(checkpoint) / REFUSED, version, message, "waiting")


def clear_said(checkpoint) -> None:
    """The refusal (or the waiting change) said for the job, no longer so."""
    said = Location.of(checkpoint) / REFUSED
    if locations.exists(said):
        locations.delete(said)


def waiting_change(spec: JobSpec, running: str | None, unsafe: list[Change]) -> str:
    """What a continuous run says of a job whose file was edited under it in a way its
    checkpoint's state cannot take, while it keeps running version ``running``."""
    listed = _listed(unsafe)
    return (
        f"job {spec.name}: its file is now version {version_of(current_parts(spec))}, which its "
        f"checkpoint's state cannot take; the continuous run that hosts it runs on at version "
        f"{running}. What changed: {listed}. To run the new version: `tidemark rebuild "
        f"{spec.name}` (built beside the running one, and swapped in by the run), or `tidemark "
        f"accept {spec.name}` if you know the state fits it; or put the file back (`tidemark "
        f"code {spec.name} --put-back`). A restart of the run refuses the new version"
    )


def check_before_start(
    cfg: TidemarkConfig, spec: JobSpec, frame: DataFrame, checkpoint=None
) -> dict:
    """Refuse (`UnsafeChange`) a new version of ``spec`` its checkpoint's state cannot take;
    otherwise record it in the checkpoint and return the record. ``checkpoint``: the job's own
    unless given (a rebuild's shadow)."""
    checkpoint = checkpoint or cfg.paths.checkpoint(spec.name)
    said = Location.of(checkpoint) / REFUSED
    old = read_record(checkpoint)
    parts = current_parts(spec)
    if old is not None and old.get("version") == version_of(parts):
        # the version that runs the checkpoint: no plan to read (most runs end here)
        clear_said(checkpoint)
        if "source" not in old:  # recorded before job files were kept: kept from now on
            old = {**old, "source": job_source(spec)}
            write_record(checkpoint, old)
        return old
    if holds_current(old, spec, source_schemas(spec)):
        # the same code and spec under another digest (recorded by text, or retexted): the
        # record is brought to the current version, with the shape it holds
        record = {
            **old,
            "version": version_of(parts),
            "parts": parts,
            "texts": code_parts(spec, texts=True),
            "source": job_source(spec),
        }
        LOG.info(
            "job %s: version %s recorded as %s (the same code)",
            spec.name,
            old["version"],
            record["version"],
        )
        write_record(checkpoint, record)
        clear_said(checkpoint)
        return record
    old, new, changes = assess(cfg, spec, frame, checkpoint)
    unsafe = [c for c in changes if c.unsafe]
    if unsafe:
        message = refusal(spec, old, new, unsafe)
        # for the health sensor (`job_change_refused`), until a run passes this check
        _say(said, new["version"], message)
        raise UnsafeChange(message)
    clear_said(checkpoint)
    if changes:
        LOG.info(
            "job %s: version %s -> %s, a safe change (%s)",
            spec.name,
            old.get("version"),
            new["version"],
            "; ".join(f"{c.what}: {c.detail}" for c in changes),
        )
    if old != new:
        write_record(checkpoint, new)
    return new
