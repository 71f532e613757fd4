"""One storage module owns the data root's I/O: `streaming_jobs.core.locations` (over obstore on a
store, pathlib on a disk). No other module hands a data-root place to `pathlib`, `os`, `shutil`
or `open`: on a store those would act on a local folder of that name, or fail.

A data-root place is what `Paths` gives for the data (landing, lake, checkpoints, savepoints,
the dbt warehouse, a table, a checkpoint, a landing folder) and ``cfg.data_root`` itself; this
machine's working state (``paths.dbt``, ``paths.dagster_home``, ``paths.logs``,
``cfg.work_root``) is a local folder by design and may be used so. Within each function, a name
assigned from an expression holding a data-root place is one too (and so on, in order), as is
the loop variable over one, and a parameter typed `Where` or `Location`; ``<place>.path`` is not (`Location.path` raises
on a store, so it is a local branch's by construction). Then none may be:

- the receiver of a file-system method (``.exists()``, ``.mkdir()``, ``.read_text()``, ...);
- an argument of ``Path(...)``, ``open(...)``, or any ``os.*`` / ``shutil.*`` function.

A line may say why its place is local whatever the data root (a ``# local-only: <why>``
comment). This reads the code, not the running program: a place passed through a parameter is not
followed (`locations` calls take `Where` for that reason, and the tests on the real S3 server
run those paths).
"""

from __future__ import annotations

import ast
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]
# the storage module and the layer under it (its store client and its lease objects)
OWNERS = {
    "streaming_jobs/core/locations.py",
    "streaming_jobs/core/stores.py",
    "streaming_jobs/core/leases.py",
}
DATA_PLACES = {
    "landing",
    "lake",
    "checkpoints",
    "savepoints",
    "warehouse",
    "table",
    "checkpoint",
    "landing_dir",
    "dbt_table",
}
FS_METHODS = {
    "exists",
    "is_file",
    "is_dir",
    "is_symlink",
    "mkdir",
    "rmdir",
    "unlink",
    "iterdir",
    "glob",
    "rglob",
    "read_text",
    "read_bytes",
    "write_text",
    "write_bytes",
    "open",
    "stat",
    "lstat",
    "rename",
    "replace",
    "touch",
    "resolve",
    "samefile",
    "symlink_to",
    "walk",
}
FS_CALLS = {"Path", "open"}
FS_MODULES = {"os", "shutil"}


def _is_data_place(node: ast.AST) -> bool:
    """``<x>.paths.<data place>`` (called or not) or ``<x>.data_root``."""
    if isinstance(node, ast.Attribute):
        if node.attr == "data_root":
            return True
        owner = node.value
        if node.attr in DATA_PLACES and isinstance(owner, ast.Attribute) and owner.attr == "paths":
            return True
    return False


def _holds(node: ast.AST, tainted: set[str]) -> bool:
    """Whether ``node`` holds a data-root place; ``<place>.path`` does not (`Location.path` is
    an error on a store: what it gives is local by construction)."""
    if isinstance(node, ast.Attribute) and node.attr == "path":
        return False
    if _is_data_place(node) or (isinstance(node, ast.Name) and node.id in tainted):
        return True
    return any(_holds(child, tainted) for child in ast.iter_child_nodes(node))


def _names(annotation: ast.AST) -> set[str]:
    """The names an annotation mentions (``Where | None``, ``"Location"``)."""
    found = set()
    for n in ast.walk(annotation):
        if isinstance(n, ast.Name):
            found.add(n.id)
        elif isinstance(n, ast.Constant) and isinstance(n.value, str):
            found.add(n.value)
    return found


def _targets(target: ast.AST) -> list[str]:
    return [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]


class _Finder(ast.NodeVisitor):
    def __init__(self, path: str, source: str) -> None:
        self.path, self.found, self.lines = path, [], source.splitlines()
        self.tainted: set[str] = set()

    def visit_FunctionDef(self, node) -> None:  # a scope of its own
        outer, self.tainted = self.tainted, set()
        every = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
        for arg in every:  # a parameter typed `Where` or `Location` may be on a store
            if arg.annotation is not None and _names(arg.annotation) & {"Where", "Location"}:
                self.tainted.add(arg.arg)
        self.generic_visit(node)
        self.tainted = outer

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Assign(self, node: ast.Assign) -> None:
        self.generic_visit(node)
        holds = _holds(node.value, self.tainted)
        for target in node.targets:
            if holds:
                self.tainted.update(_targets(target))
            elif isinstance(target, ast.Name):  # rebound to something local
                self.tainted.discard(target.id)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.generic_visit(node)
        if node.value is not None and _holds(node.value, self.tainted):
            self.tainted.update(_targets(node.target))

    def visit_For(self, node: ast.For) -> None:
        if _holds(node.iter, self.tainted):
            self.tainted.update(_targets(node.target))
        self.generic_visit(node)

    def visit_comprehension(self, node: ast.comprehension) -> None:
        if _holds(node.iter, self.tainted):
            self.tainted.update(_targets(node.target))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        args = [*node.args, *(k.value for k in node.keywords)]
        said = None
        if (
            isinstance(func, ast.Attribute)
            and func.attr in FS_METHODS
            # Path.replace takes one target; str's and datetime's take more, or keywords
            and not (func.attr == "replace" and (node.keywords or len(node.args) != 1))
            and _holds(func.value, self.tainted)
        ):
            said = f".{func.attr}() on a data-root place"
        elif isinstance(func, ast.Name) and func.id in FS_CALLS:
            if any(_holds(a, self.tainted) for a in args):
                said = f"{func.id}() of a data-root place"
        elif (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id in FS_MODULES
        ):
            if any(_holds(a, self.tainted) for a in args):
                said = f"{func.value.id}.{func.attr}() of a data-root place"
        if said and "# local-only:" not in self.lines[node.lineno - 1]:
            self.found.append(f"{self.path}:{node.lineno}: {said}: {ast.unparse(node)[:120]}")
        self.generic_visit(node)


def _findings(path: Path) -> list[str]:
    relative = str(path.relative_to(CHECKOUT))
    source = path.read_text()
    finder = _Finder(relative, source)
    finder.visit(ast.parse(source, filename=relative))
    return finder.found


def _sources() -> list[Path]:
    files = []
    for top in ("streaming_jobs", "orchestration"):
        files += sorted((CHECKOUT / top).rglob("*.py"))
    return [f for f in files if str(f.relative_to(CHECKOUT)) not in OWNERS]


def test_only_the_storage_module_does_file_operations_on_data_root_places():
    found = [line for path in _sources() for line in _findings(path)]
    assert not found, "data-root I/O outside streaming_jobs/core/locations.py:\n" + "\n".join(found)


def test_the_check_finds_what_it_forbids(tmp_path):
    """The check itself, on code written to break the rule (and code that keeps it)."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import os, shutil\n"
        "from pathlib import Path\n"
        "def f(cfg):\n"
        "    cfg.paths.checkpoint('j').exists()\n"
        "    folder = cfg.paths.lake / 'gold'\n"
        "    for child in folder.iterdir():\n"
        "        child.unlink()\n"
        "    shutil.rmtree(cfg.paths.savepoints)\n"
        "    os.listdir(cfg.data_root)\n"
        "    open(Path(cfg.paths.landing_dir('x')) / 'f')\n"
        "    cfg.paths.logs.mkdir()\n"  # this machine's working state: allowed
        "    (cfg.work_root / 'x').write_text('')\n"  # likewise
        "    Path(cfg.data_root)  # local-only: said why\n"
        "    cfg.paths.lake.stat().st_mtime\n"
        "def g(place: 'Where', other: Path):\n"
        "    place.exists() or other.exists()\n"
        "    place.path.exists()\n"  # a Location's local path: allowed
        "    place = Path('/tmp')\n"
        "    place.exists()\n"  # rebound: allowed
    )
    finder = _Finder("bad.py", bad.read_text())
    finder.visit(ast.parse(bad.read_text()))
    lines = sorted(int(f.split(":")[1]) for f in finder.found)
    assert lines == [4, 6, 7, 8, 9, 10, 10, 14, 16], finder.found
