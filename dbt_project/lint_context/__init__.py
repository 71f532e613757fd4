"""The Jinja context sqlfluff lints the dbt project with (``.sqlfluff``: the jinja templater,
``library_path``): what dbt gives a model at parse time, with the jobs' real ``var('jobs')``.

sqlfluff's dbt builtins answer ``var()`` with a placeholder string, so every loop over the jobs
failed to render. Here ``var('jobs')`` is the registry's (`orchestration.dbt_vars.job_vars` of
the reconciled jobs, the built-in ones when lint runs), ``execute`` is false as in dbt's parse
(the queries a model runs while it builds are not run), and ``env_var`` gives its default.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from orchestration.recon.dbt_models import hand_written  # noqa: E402
from orchestration.recon.dbt_vars import job_vars  # noqa: E402
from streaming_jobs.storage.registry import catalogue  # noqa: E402

# sqlfluff executes this module again for every file it renders: the vars are built once per
# process and kept on the registry module
_VARS = getattr(sys.modules["streaming_jobs.storage.registry"], "_lint_vars", None)
if _VARS is None:
    import yaml

    project = yaml.safe_load((Path(__file__).resolve().parents[1] / "dbt_project.yml").read_text())
    _VARS = {
        **project.get("vars", {}),
        "jobs": job_vars(
            {
                name: spec
                for name, spec in catalogue(analysed=False).jobs.items()
                if hand_written(name) or spec.batch_sql
            }
        )
    }
    sys.modules["streaming_jobs.storage.registry"]._lint_vars = _VARS

execute = False
invocation_id = "sqlfluff-lint"  # dbt's id of one invocation
project_name = "tidemark"
selected_resources: list[str] = []  # what an invocation selected (none: a parse)


def var(name, default=None):
    return _VARS.get(name, default)


def env_var(name, default=""):
    return default


class _Raise:
    """dbt's ``exceptions``: a compiler error stops the render, as it stops dbt."""

    @staticmethod
    def raise_compiler_error(message):
        raise RuntimeError(message)

    @staticmethod
    def warn(message):
        return ""


exceptions = _Raise()
