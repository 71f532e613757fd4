"""The import graph points one way: no cycle, and no module imports from a layer above its own.

Each layer is a list of folders (a module may import its own layer and the ones below), lowest
first:

    base           streaming_jobs/core/ (config, settings, checkpoints, delta_log, validation,
                   interrupts, and the data root's places, stores and leases) and the job API
                   at the package's top: spec, schemas, intervals, stateful/ (what job files
                   import)
    storage        streaming_jobs/storage/ (Spark, Delta, the ops tables, the registry,
                   expectations, restores, Kafka's reader) and the built-in jobs/
    runtime        streaming_jobs/runtime/ (ingestion, gold, progress, analysis, the runner)
    operations     streaming_jobs/operations/ (what is run on a data root) and services/ (the
                   servers tidemark starts: SQL endpoint, Kafka broker, Spark cluster)
    orchestration  orchestration/ (never imported by streaming_jobs): lib/, recon/, cli/, defs/

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
            "streaming_jobs.core",
            "streaming_jobs.spec",
            "streaming_jobs.schemas",
            "streaming_jobs.intervals",
            "streaming_jobs.stateful",
        ],
    ),
    ("storage", ["streaming_jobs.storage", "streaming_jobs.jobs"]),
    ("runtime", ["streaming_jobs.runtime"]),
    ("operations", ["streaming_jobs.operations", "streaming_jobs.services"]),
    ("orchestration", ["orchestration"]),
]


def test_every_module_is_in_a_layer_folder():
    """Only the job API (spec, schemas, intervals) sits at streaming_jobs' top; every other
    module is in its layer's folder, so its path says its layer."""
    top = sorted(p.stem for p in (CHECKOUT / "streaming_jobs").glob("*.py"))
    assert top == ["__init__", "intervals", "schemas", "spec"]
    folders = {"core", "storage", "runtime", "operations", "services", "jobs", "stateful"}
    found = {p.name for p in (CHECKOUT / "streaming_jobs").iterdir() if p.is_dir()}
    assert found - {"__pycache__"} == folders
    assert sorted(p.stem for p in (CHECKOUT / "orchestration").glob("*.py")) == [
        "__init__",
        "definitions",
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
