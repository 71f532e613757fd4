"""The job registry: every module in this package that declares a ``SPEC`` is a job.

Adding a job is adding one module here (a docstring, a pure ``build`` and a ``SPEC``); the
runner, the Dagster assets and the dbt reconciliation pick it up from `registry()`.
"""

from __future__ import annotations

import importlib
import pkgutil

from streaming_jobs.jobs.spec import JobSpec


def registry() -> dict[str, JobSpec]:
    specs: dict[str, JobSpec] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name == "spec":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        spec = getattr(module, "SPEC", None)
        if isinstance(spec, JobSpec):
            if spec.name in specs:
                raise ValueError(f"two job modules declare the job name {spec.name!r}")
            specs[spec.name] = spec
    return dict(sorted(specs.items()))


def get_job(name: str) -> JobSpec:
    jobs = registry()
    try:
        return jobs[name]
    except KeyError:
        raise KeyError(f"unknown job {name!r}; known jobs: {', '.join(jobs)}") from None
