"""The dbt project, in one place: where it lives, where its target goes, how dbt is invoked."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from dagster_dbt import DbtProject

from streaming_jobs.config import CHECKOUT, TidemarkConfig

DBT_PROJECT_DIR = CHECKOUT / "dbt_project"  # the project's source, in the checkout


def run_project_dir(cfg: TidemarkConfig) -> Path:
    """The copy dbt runs: the source plus the generated models (orchestration/dbt_models.py)."""
    return cfg.paths.dbt / "project"


def dbt_executable() -> str:
    """tidemark-dbt: dbt with tidemark's SparkSession and the job registry's --vars."""
    return str(Path(sys.executable).with_name("tidemark-dbt"))


def dbt_project(cfg: TidemarkConfig) -> DbtProject:
    return DbtProject(
        project_dir=run_project_dir(cfg),
        profiles_dir=run_project_dir(cfg),
        target_path=cfg.paths.dbt / "target",
    )


def ensure_manifest(cfg: TidemarkConfig) -> Path:
    """Bring the data root's dbt project up to date and parse it (no Spark) if it changed."""
    from orchestration.dbt_models import sync

    changed = sync(cfg)  # first: the project folder must exist before DbtProject is built
    project = dbt_project(cfg)
    if changed or not project.manifest_path.exists():
        result = subprocess.run(
            [dbt_executable(), "parse", "--quiet"],
            env=_dbt_env(cfg, project.target_path),
            capture_output=True, text=True,
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"dbt parse of {run_project_dir(cfg)} (the data root's copy of {DBT_PROJECT_DIR}) "
                "failed; fix the project or the job named below and run 'make setup':\n"
                f"{result.stdout[-4000:]}{result.stderr[-4000:]}"
            )
    return project.manifest_path


def _dbt_env(cfg: TidemarkConfig, target: Path) -> dict[str, str]:
    import os

    return {
        **os.environ,
        "TIDEMARK_DATA_ROOT": str(cfg.data_root),
        "DBT_PROFILES_DIR": str(run_project_dir(cfg)),
        "DBT_PROJECT_DIR": str(run_project_dir(cfg)),
        "DBT_TARGET_PATH": str(target),
        "DBT_LOG_PATH": str(target),
    }
