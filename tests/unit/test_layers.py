"""The import graph points one way: no cycle, and no module imports from a layer above its own.

Layers, lowest first (a module may import its own layer and the ones below):

    base         config, intervals, schemas, spec, delta_log, checkpoints, validation, stateful.*
                 (and the packages' own __init__)
    storage      ops_tables, spark, lake, failures, jobs.*, sql_jobs, registry, generator,
                 expectations, restores
    streaming    ingestion, gold, progress, tables, runner, analysis
    operations   operations.*, sql_endpoint
    orchestration  orchestration.* (never imported by streaming_jobs)

Imports inside functions count too: a deferred import is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]
PACKAGES = ("streaming_jobs", "orchestration")

LAYERS = [
    (
        "base",
        [
            "streaming_jobs.config",
            "streaming_jobs.intervals",
            "streaming_jobs.schemas",
            "streaming_jobs.spec",
            "streaming_jobs.delta_log",
            "streaming_jobs.checkpoints",
            "streaming_jobs.validation",
            "streaming_jobs.stateful",
            "streaming_jobs.processes",
            "streaming_jobs.interrupts",
            "streaming_jobs.settings",
        ],
    ),
    (
        "storage",
        [
            "streaming_jobs.ops_tables",
            "streaming_jobs.spark",
            "streaming_jobs.lake",
            "streaming_jobs.failures",
            "streaming_jobs.jobs",
            "streaming_jobs.sql_jobs",
            "streaming_jobs.registry",
            "streaming_jobs.generator",
            "streaming_jobs.expectations",
            "streaming_jobs.restores",
            "streaming_jobs.maven",
            "streaming_jobs.kafka",
            "streaming_jobs.kafka_broker",
            "streaming_jobs.spark_cluster",
        ],
    ),
    (
        "streaming",
        [
            "streaming_jobs.ingestion",
            "streaming_jobs.gold",
            "streaming_jobs.progress",
            "streaming_jobs.analysis",
            "streaming_jobs.tables",
            "streaming_jobs.runner",
        ],
    ),
    ("operations", ["streaming_jobs.operations", "streaming_jobs.sql_endpoint"]),
    ("orchestration", ["orchestration"]),
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(CHECKOUT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for package in PACKAGES for p in (CHECKOUT / package).rglob("*.py")}


def imports(path: Path, name: str, known: set[str]) -> set[str]:
    """The project modules ``path`` imports (anywhere in the file)."""
    found = set()
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1]
                    + ([base] if base else [])
                )
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def layer_of(name: str) -> int:
    if name in PACKAGES:  # the packages' own __init__: docstrings only
        return 0
    for rank, (_, prefixes) in enumerate(LAYERS):
        if any(name == p or name.startswith(p + ".") for p in prefixes):
            return rank
    raise AssertionError(f"module {name} is in no layer: add it to LAYERS in {__file__}")


def graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    return {name: imports(path, name, known) for name, path in found.items()}


def test_every_import_points_down_or_sideways():
    upward = [
        f"{name} ({LAYERS[layer_of(name)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
        for name, targets in graph().items()
        for target in targets
        if layer_of(target) > layer_of(name)
    ]
    assert upward == []


def test_the_import_graph_has_no_cycle():
    edges = graph()
    state: dict[str, str] = {}
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for target in sorted(edges.get(node, ())):
            if state.get(target) == "open":
                cycles.append(" -> ".join(stack[stack.index(target) :] + [target]))
            elif target not in state:
                visit(target, stack + [target])
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    assert cycles == []
