"""The job registry: every module that declares a ``SPEC`` is a job.

Jobs come from this package and from the folders in ``TIDEMARK_JOBS_PATH`` (separated by
``:``), where a team keeps its own jobs outside the checkout. Adding a job is adding one module
(a docstring, a pure ``build`` and a ``SPEC``); the runner and the Dagster assets pick it up
from `registry()`.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil
from pathlib import Path

from streaming_jobs.jobs.spec import JobSpec

# Modules of this package that are shared helpers, not jobs.
HELPERS = {"spec", "dedup", "intervals", "panes", "sliding", "frames", "epochs"}


def _package_modules():
    for info in pkgutil.iter_modules(__path__):
        if info.name not in HELPERS:
            yield f"{__name__}.{info.name}", importlib.import_module(f"{__name__}.{info.name}")


def _path_modules():
    for folder in filter(None, os.environ.get("TIDEMARK_JOBS_PATH", "").split(os.pathsep)):
        folder_path = Path(folder)
        if not folder_path.is_dir():
            raise FileNotFoundError(
                f"TIDEMARK_JOBS_PATH names {folder}, which is not a folder; fix the variable")
        for file in sorted(folder_path.glob("*.py")):
            name = f"tidemark_user_jobs.{file.stem}"
            spec = importlib.util.spec_from_file_location(name, file)
            module = importlib.util.module_from_spec(spec)
            try:
                spec.loader.exec_module(module)
            except Exception as exc:
                raise ImportError(f"job module {file} failed to load: {exc}") from exc
            yield str(file), module


def registry() -> dict[str, JobSpec]:
    specs: dict[str, JobSpec] = {}
    where: dict[str, str] = {}
    for origin, module in [*_package_modules(), *_path_modules()]:
        spec = getattr(module, "SPEC", None)
        if isinstance(spec, JobSpec):
            if spec.name in specs:
                raise ValueError(
                    f"job name {spec.name!r} is declared twice ({where[spec.name]} and {origin}); "
                    "rename one of them")
            specs[spec.name], where[spec.name] = spec, origin
    return dict(sorted(specs.items()))


def get_job(name: str) -> JobSpec:
    jobs = registry()
    try:
        return jobs[name]
    except KeyError:
        raise KeyError(f"unknown job {name!r}; known jobs: {', '.join(jobs)}") from None
