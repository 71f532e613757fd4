"""The registries: every stream and every job tidemark knows, from one place.

Jobs come from the package `streaming_jobs.jobs` and from the folders in ``TIDEMARK_JOBS_PATH``
(separated by ``:``), where a team keeps its own jobs outside the checkout. A job is one file:

- a Python module with a docstring, a pure ``build`` and a ``SPEC`` (`JobSpec`), or
- a SQL file: a header of ``-- key: value`` lines (the spec) above one Spark SQL query over
  the source's events (see `streaming_jobs.sql_jobs`).

A module in those folders may also declare streams (``STREAM`` or ``STREAMS``, `StreamSchema`):
a landing folder of JSON lines with its schema. The runner, the Dagster assets and the
generated dbt models all pick them up from `registry()` and `streams()`.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from dataclasses import replace
from pathlib import Path
from types import ModuleType

from streaming_jobs import jobs as builtin_jobs
from streaming_jobs.schemas import STREAMS, StreamSchema
from streaming_jobs.spec import JobSpec

PACKAGE_DIR = Path(builtin_jobs.__file__).resolve().parent


def _package_modules():
    for info in pkgutil.iter_modules(builtin_jobs.__path__):
        name = f"{builtin_jobs.__name__}.{info.name}"
        yield name, importlib.import_module(name)


def job_folders() -> list[Path]:
    """The folders of ``TIDEMARK_JOBS_PATH`` (`TidemarkConfig.jobs_path`), checked."""
    from streaming_jobs.config import TidemarkConfig

    folders = []
    for path in TidemarkConfig.from_env().jobs_path:
        if not path.is_dir():
            raise FileNotFoundError(
                f"TIDEMARK_JOBS_PATH names {path}, which is not a folder; fix the variable")
        folders.append(path)
    return folders


def _files(suffix: str) -> list[Path]:
    return [f for folder in job_folders() for f in sorted(folder.glob(f"*{suffix}"))]


# Loaded user modules by file and modification time: a module runs once per version of its file.
_LOADED: dict[tuple[str, float], ModuleType] = {}


def _path_modules():
    for file in _files(".py"):
        key = (str(file), file.stat().st_mtime)
        if key not in _LOADED:
            spec = importlib.util.spec_from_file_location(f"tidemark_user_jobs.{file.stem}", file)
            module = importlib.util.module_from_spec(spec)
            try:
                spec.loader.exec_module(module)
            except Exception as exc:
                raise ImportError(f"job module {file} failed to load: {exc}") from exc
            _LOADED[key] = module
        yield str(file), _LOADED[key]


def _sql_specs(known: dict[str, StreamSchema]):
    from streaming_jobs.sql_jobs import load_sql_job

    for file in [*sorted(PACKAGE_DIR.glob("*.sql")), *_files(".sql")]:
        yield str(file), load_sql_job(file, known)


def streams() -> dict[str, StreamSchema]:
    """The built-in streams and those declared in the job folders."""
    known, where = dict(STREAMS), {name: "streaming_jobs/schemas.py" for name in STREAMS}
    for origin, module in _path_modules():
        declared = getattr(module, "STREAMS", None) or [getattr(module, "STREAM", None)]
        for stream in declared:
            if isinstance(stream, StreamSchema):
                if stream.name in known:
                    raise ValueError(
                        f"stream {stream.name!r} is declared twice ({where[stream.name]} and "
                        f"{origin}); rename one of them")
                known[stream.name], where[stream.name] = stream, origin
    return known


def registry() -> dict[str, JobSpec]:
    specs: dict[str, JobSpec] = {}
    where: dict[str, str] = {}
    modules = [(getattr(m, "__file__", None) or o, getattr(m, "SPEC", None))
               for o, m in [*_package_modules(), *_path_modules()]]
    known = streams()
    for origin, spec in [*modules, *_sql_specs(known)]:
        if isinstance(spec, JobSpec):
            if spec.name in specs:
                raise ValueError(
                    f"job name {spec.name!r} is declared twice ({where[spec.name]} and {origin}); "
                    "rename one of them")
            if spec.origin is None:
                spec = replace(spec, origin=origin)
            specs[spec.name], where[spec.name] = spec, origin
    for name, spec in specs.items():
        unknown = [s for s in spec.sources if s not in known]
        if unknown:
            raise ValueError(
                f"job {name} ({where[name]}) reads {', '.join(unknown)}, which no registered "
                f"stream declares; registered streams: {', '.join(sorted(known))}")
    return dict(sorted(specs.items()))


def get_job(name: str) -> JobSpec:
    jobs = registry()
    try:
        return jobs[name]
    except KeyError:
        raise KeyError(f"unknown job {name!r}; known jobs: {', '.join(jobs)}") from None


def stream_schema(name: str) -> StreamSchema:
    """A registered stream: built in (`streaming_jobs.schemas`) or declared in a job folder."""
    known = streams()
    try:
        return known[name]
    except KeyError:
        raise KeyError(
            f"unknown stream {name!r}; registered streams: {', '.join(sorted(known))}. "
            "Declare it in streaming_jobs/schemas.py, or as STREAM in a module of a job folder."
        ) from None
