"""A job's version: a fingerprint of everything that defines its results, and the record of it
a checkpoint keeps.

The version hashes the job's **parts** (`version_parts`):

- its code: a SQL job's query (its comments and layout left out: `sql_digest`); a Python
  job's functions and classes (``build`` and what it defines beside it), and every module of
  ``streaming_jobs.stateful`` it uses. Python code is hashed by its syntax (`syntax_digest`):
  a comment, a docstring, the layout or where an import sits changes no version;
- its spec: sources, keys, measures, event time, watermark, TTL, output mode, parameters,
  ``reads`` and partition columns;
- its sources' schemas: fields and types, event time, deduplication key.

Not in it: the description, state thresholds, tolerances, expectations and the recon settings,
which change no row of gold.

Dagster shows the version as the gold asset's ``code_version``. Each run writes the version,
its parts and the query's state shape (`streaming_jobs.runtime.changes`) to the checkpoint's
``tidemark_version.json`` before its first batch; each progress row names the version that ran
it. The next run compares its own with that record before any batch.

The record keeps each piece's text digest beside its syntax digest (``texts``). A piece is
unchanged if either matches (`unchanged_pieces`): a record written before code was hashed by
its syntax (its parts hold text digests), and code a new Python renders otherwise, both run on.
It also keeps the text of the file that declares the job (``source``, `job_source`), so that
a version's code can be shown and put back after a rollback (`tidemark code`).
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import sys
import textwrap
import threading
from dataclasses import replace
from pathlib import Path
from types import ModuleType

from streaming_jobs.core import locations
from streaming_jobs.core.locations import Where
from streaming_jobs.schemas import StreamSchema
from streaming_jobs.spec import JobSpec

# Python 3.11's AST constructor counts its recursion depth per interpreter, not per thread: two
# threads parsing at once can fail one with "SystemError: AST constructor recursion depth
# mismatch" (python/cpython#106905). A continuous run starts its queries side by side, each
# hashing its job's code (`inspect.getsource` parses a class's module): a restart of a killed
# run failed so in tools/benchmarks/latency.py --dagster (one in ten restarts; one more failed
# without a trace kept). So the parsing here takes turns, 2 to 16 ms a job.
PARSING = threading.RLock()

RECORD = "tidemark_version.json"
# beside it: the last refusal of a new version (`streaming_jobs.runtime.changes`), until a run
# passes the check
REFUSED = "tidemark_refused.json"
STATEFUL_PACKAGE = "streaming_jobs.stateful"
# a job file larger than this is not kept in its record (`job_source`)
SOURCE_LIMIT_BYTES = 1 << 20
# in the namespace of a user folder's Python module: its file's text as the registry read and
# ran it (`streaming_jobs.storage.registry`), whatever the file holds by the time it is read
LOADED_TEXT = "__tidemark_source__"


# imports that change no result: annotations and the language's own switches
_NOT_CODE = {"__future__", "typing"}
# tidemark's own code whose text changed with its syntax unchanged since checkpoints recorded
# text digests: the text digest a checkpoint may hold -> the syntax digest it stands for
# (each entry checked against the file in git by tests/unit/test_versions.py)
RETEXTED = {
    # pandas imported where used (478b91e: at the top)
    "a63e20f061a7": "29c9d63d2187",  # streaming_jobs/stateful/frames.py
    "2b222e0981be": "685e802856b4",  # streaming_jobs/stateful/sliding.py
    "73ac0f2b3bc6": "505e7f5b66c6",  # streaming_jobs/jobs/user_activity_profile.latest_profile
}


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _docstring(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _Syntax(ast.NodeTransformer):
    """Code as its syntax: docstrings gone, every import taken out into ``imports``, and an
    ``if TYPE_CHECKING:`` left empty by that dropped."""

    def __init__(self) -> None:
        self.imports: set[str] = set()

    def _imported(self, node: ast.Import | ast.ImportFrom) -> None:
        if isinstance(node, ast.ImportFrom):
            modules = [node.module or ""] if not node.level else ["."]
        else:
            modules = [alias.name for alias in node.names]
        if any(m.split(".")[0] not in _NOT_CODE for m in modules):
            self.imports.add(ast.unparse(node))
        return None

    visit_Import = visit_ImportFrom = _imported

    def generic_visit(self, node: ast.AST) -> ast.AST:
        super().generic_visit(node)
        for field in ("body", "orelse", "finalbody"):
            statements = getattr(node, field, None)
            if not isinstance(statements, list):
                continue
            if field == "body" and statements and _docstring(statements[0]):
                if isinstance(
                    node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
                ):
                    statements = statements[1:]
            statements = [
                s
                for s in statements
                if not (
                    isinstance(s, ast.If)
                    and _type_checking(s.test)
                    and all(isinstance(b, ast.Pass) for b in s.body + s.orelse)
                )
            ]
            if field == "body" and not statements and not isinstance(node, ast.Module):
                statements = [ast.Pass()]
            setattr(node, field, statements)
        return node


def syntax_digest(source: str, imports: bool = True) -> str:
    """The digest of Python code's syntax (the text's digest if it does not parse on its own).
    ``imports``: whether the set of what it imports counts (a whole module's: yes; a function's
    or class's: no, as its module's imports are not part of it either)."""
    try:
        with PARSING:
            tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return _digest(source)
    syntax = _Syntax()
    code = ast.unparse(syntax.visit(tree))
    return _digest(code + ("\n\n" + "\n".join(sorted(syntax.imports)) if imports else ""))


def _sql_words(sql: str) -> str | None:
    """A query as Spark reads it: comments gone (a hint, ``/*+ ... */``, kept), and each run of
    whitespace and comments outside quotes one space. None if a quote or comment is left open."""
    out: list[str] = []
    i, n = 0, len(sql)

    def gap() -> None:
        if out and out[-1] != " ":
            out.append(" ")

    while i < n:
        c = sql[i]
        if c in "'\"`":  # a literal or a quoted name, as it is (a backslash escapes in one)
            j = i + 1
            while j < n and sql[j] != c:
                j += 2 if sql[j] == "\\" and c != "`" else 1
            if j >= n:
                return None
            out.append(sql[i : j + 1])
            i = j + 1
        elif sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end
            gap()
        elif sql.startswith("/*", i) and not sql.startswith("/*+", i):
            depth, i = 1, i + 2  # Spark's bracketed comments nest
            while depth and i < n:
                if sql.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif sql.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
            if depth:
                return None
            gap()
        elif c.isspace():
            gap()
            i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out).strip()


def sql_digest(sql: str) -> str:
    """The digest of a SQL job's query: its comments and layout change nothing (the text's
    digest if a quote or comment is left open)."""
    words = _sql_words(sql)
    return _digest(sql.strip() if words is None else words)


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


def code_parts(spec: JobSpec, texts: bool = False) -> dict[str, str]:
    """A hash per piece of the job's code: ``query`` for a SQL job; for a Python job each
    function and class its module defines (by name) and each stateful module it uses. Python
    pieces are hashed by their syntax, or by their text with ``texts``. Those of the code the
    spec was loaded with (`loaded_code`) when the registry loaded it."""
    if _loaded(spec):
        return dict(spec.loaded_code["texts" if texts else "parts"])
    return _digests(_pieces(spec), texts)


def _pieces(spec: JobSpec) -> dict[str, tuple[str, bool] | str]:
    """Each piece of the job's code, read once: its source and whether its imports count (a
    whole stateful module's do), or, where no source is found, its digest already."""
    sql = getattr(spec.build, "sql", None)
    if isinstance(sql, str):
        return {"query": (sql, False)}
    with PARSING:  # inspect.getsource parses a class's module
        return _python_pieces(spec)


def _digests(pieces: dict[str, tuple[str, bool] | str], texts: bool) -> dict[str, str]:
    """`_pieces` hashed by their syntax (a query's by `sql_digest`), or by their text."""
    out = {}
    for name, piece in pieces.items():
        if isinstance(piece, str):
            out[name] = piece
        elif name == "query":
            out[name] = _digest(piece[0].strip()) if texts else sql_digest(piece[0])
        else:
            out[name] = _digest(piece[0]) if texts else syntax_digest(*piece)
    return out


def _module_of(build) -> tuple[ModuleType | None, dict[str, str] | None]:
    """The module ``build`` is defined in, and (for a module of a user's job folder) the text
    of each function and class its file defines at the top, by name; (None, None) when
    neither is found. A user's module is loaded from its file without a place in
    ``sys.modules`` (`streaming_jobs.storage.registry`: Spark's Python workers get its
    functions and classes by value), where `inspect` finds no class's source: its pieces are
    read from the file, as it is when the registry loads the module."""
    name = getattr(build, "__module__", "") or ""
    module = sys.modules.get(name)
    if module is not None:
        return module, None
    namespace = getattr(build, "__globals__", None) or {}
    file = namespace.get("__file__")
    if namespace.get("__name__") != name or not file:
        return None, None
    try:
        text = namespace.get(LOADED_TEXT)
        if not isinstance(text, str):
            text = Path(file).read_text(encoding="utf-8")
        with PARSING:
            tree = ast.parse(text)
    except (OSError, UnicodeDecodeError, SyntaxError):
        return None, None
    lines = text.splitlines(keepends=True)
    sources = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            sources[node.name] = "".join(lines[first - 1 : node.end_lineno])
    view = ModuleType(name)  # its namespace, read as a module's
    view.__dict__.update(namespace)
    return view, sources


def _python_pieces(spec: JobSpec) -> dict[str, tuple[str, bool] | str]:
    module, sources = _module_of(spec.build)
    if module is None:  # a build made at run time (a test's lambda): its own source
        try:
            return {"build": (inspect.getsource(spec.build), False)}
        except (OSError, TypeError):
            return {"build": _digest(repr(spec.build))}
    pieces: dict[str, tuple[str, bool] | str] = {}
    for name, value in sorted(vars(module).items()):
        if (inspect.isfunction(value) or inspect.isclass(value)) and getattr(
            value, "__module__", None
        ) == module.__name__:
            try:
                source = sources[name] if sources is not None else inspect.getsource(value)
                pieces[name] = (source, False)
            except (OSError, TypeError, KeyError):
                pieces[name] = _digest(repr(value))
    for used in sorted(_stateful_modules(module) - {module.__name__}):
        pieces[used] = (inspect.getsource(sys.modules[used]), True)
    return pieces


def unchanged_pieces(old: dict, code: dict[str, str], texts: dict[str, str]) -> set[str]:
    """The pieces of ``code`` (syntax digests; ``texts``: the same pieces' text digests) that
    the ``old`` record holds unchanged: the same syntax, or the same text (a record from before
    syntax digests, or code a new Python renders otherwise), or tidemark's own code retexted
    (`RETEXTED`)."""
    was, was_texts = (old.get("parts") or {}).get("code") or {}, old.get("texts") or {}
    return {
        piece
        for piece, digest in code.items()
        if piece in was
        and (
            was[piece] in (digest, texts.get(piece))
            or RETEXTED.get(was[piece]) == digest
            or (piece in was_texts and was_texts[piece] == texts.get(piece))
        )
    }


def record_differs(old: dict, parts: dict, texts: dict[str, str]) -> tuple[str, ...]:
    """What of ``parts`` (a job's version parts now; ``texts``: its code's text digests) the
    version record ``old`` (a checkpoint's or a savepoint's) does not hold: ``code: <piece>``
    for each piece changed, then each other part that differs. Empty when it is the same
    version, or the same parts with every piece unchanged, or a job of a user's folder that an
    earlier release recorded by its build alone (`_module_of`), with that build unchanged."""
    if old.get("version") == version_of(parts):
        return ()
    was = old.get("parts") or {}
    code, code_was = parts["code"], set(was.get("code") or {})
    kept = unchanged_pieces(old, code, texts)
    build_only = code_was == {"build"} and set(code) != code_was
    if build_only and "build" in kept:
        out = []
    else:
        out = [f"code: {piece}" for piece in sorted(code_was | set(code)) if piece not in kept]
    rest = json.loads(json.dumps({k: v for k, v in parts.items() if k != "code"}, sort_keys=True))
    names = sorted((set(rest) | set(was)) - {"code"})
    return tuple(out + [part for part in names if was.get(part) != rest.get(part)])


def holds_current(old: dict | None, spec: JobSpec, streams: dict[str, StreamSchema]) -> bool:
    """Whether the ``old`` record (a checkpoint's or a savepoint's) is of the job's current
    version (`record_differs` says nothing differs)."""
    if not old:
        return False
    return not record_differs(old, version_parts(spec, streams), code_parts(spec, texts=True))


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


def job_source(spec: JobSpec) -> dict | None:
    """The file that declares the job (its SQL file or Python module) and its text, for the
    version record: what `tidemark code` shows and puts back. None when the job is declared in
    no readable file (one made at run time) or the file is over ``SOURCE_LIMIT_BYTES``. The
    text the spec was loaded from (`loaded_code`) when the registry loaded it."""
    if _loaded(spec):
        return spec.loaded_code["source"]
    return _job_source(spec)


def _job_source(spec: JobSpec) -> dict | None:
    if not spec.origin:
        return None
    text = _text_loaded(spec)
    if text is not None:
        too_long = len(text.encode("utf-8")) > SOURCE_LIMIT_BYTES
        return None if too_long else {"file": spec.origin, "text": text}
    try:
        path = Path(spec.origin)  # a job file of the code's, never a data-root place
        if path.stat().st_size > SOURCE_LIMIT_BYTES:
            return None
        return {"file": str(path), "text": path.read_text(encoding="utf-8")}
    except (OSError, UnicodeDecodeError):
        return None


def _text_loaded(spec: JobSpec) -> str | None:
    """The text of ``spec``'s file as the registry read it to load the job: a SQL job's (its
    query's ``text``), a user folder's Python module's (`LOADED_TEXT`); None for a built-in
    module, whose file is read."""
    if isinstance(getattr(spec.build, "sql", None), str):
        text = getattr(spec.build, "text", None)
    else:
        namespace = getattr(spec.build, "__globals__", None) or {}
        text = namespace.get(LOADED_TEXT) if namespace.get("__file__") == spec.origin else None
    return text if isinstance(text, str) else None


# The code of each loaded Python job, by its build function (held, so that its id stays its
# own): computed once per module load, while the module's file is the text it ran.
_LOADED_CODE: dict[int, tuple[object, dict]] = {}
_LOADED_CODE_LOCK = threading.Lock()


def loaded_code(spec: JobSpec) -> dict:
    """What ``spec``'s code is as it was loaded: its pieces' digests (by syntax and by text)
    and its file's text. The registry takes it when it loads the job, and `code_parts` and
    `job_source` answer from it: a run holding a job's code after its file changed (a swap or
    an accept that failed, a built-in module edited under the run) labels, records and puts
    back that code, not the file's new text under the old code's version. A Python job's is
    taken once per load of its module; a SQL job's query is in its spec, and its file is read
    again with each load."""
    fresh = replace(spec, loaded_code=None)

    def taken() -> dict:
        pieces = _pieces(fresh)  # (the code read once, hashed both ways)
        return {
            "build": spec.build,
            "parts": _digests(pieces, False),
            "texts": _digests(pieces, True),
            "source": _job_source(fresh),
        }

    if isinstance(getattr(spec.build, "sql", None), str):
        return taken()
    with _LOADED_CODE_LOCK:
        held = _LOADED_CODE.get(id(spec.build))
        if held is None or held[0] is not spec.build:
            held = _LOADED_CODE[id(spec.build)] = (spec.build, taken())
        return held[1]


def _loaded(spec: JobSpec) -> bool:
    """Whether ``spec`` holds its code as loaded (not a copy given another build since)."""
    return spec.loaded_code is not None and spec.loaded_code.get("build") is spec.build


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
