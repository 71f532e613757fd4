"""The dbt project, in one place: where it lives, where its target goes, how dbt is invoked."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from dagster_dbt import DbtProject

from streaming_jobs.config import CHECKOUT, TidemarkConfig

DBT_PROJECT_DIR = CHECKOUT / "dbt_project"


def dbt_executable() -> str:
    """tidemark-dbt: dbt with tidemark's SparkSession and the job registry's --vars."""
    return str(Path(sys.executable).with_name("tidemark-dbt"))


def dbt_project(cfg: TidemarkConfig) -> DbtProject:
    return DbtProject(
        project_dir=DBT_PROJECT_DIR,
        profiles_dir=DBT_PROJECT_DIR,
        target_path=cfg.paths.dbt / "target",
    )


def _stale(manifest: Path) -> bool:
    if not manifest.exists():
        return True
    built = manifest.stat().st_mtime
    sources = [p for p in DBT_PROJECT_DIR.rglob("*") if p.suffix in (".sql", ".yml", ".yaml")]
    jobs = (CHECKOUT / "streaming_jobs" / "jobs").glob("*.py")  # they feed dbt's --vars
    return any(p.stat().st_mtime > built for p in [*sources, *jobs])


def ensure_manifest(cfg: TidemarkConfig) -> Path:
    """Parse the dbt project (no Spark needed) when its files changed since the last parse."""
    project = dbt_project(cfg)
    if _stale(project.manifest_path):
        result = subprocess.run(
            [dbt_executable(), "parse", "--quiet"],
            env=_dbt_env(cfg, project.target_path),
            capture_output=True, text=True,
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"dbt parse of {DBT_PROJECT_DIR} failed; fix the project and run 'make setup':\n"
                f"{result.stdout[-4000:]}{result.stderr[-4000:]}"
            )
    return project.manifest_path


def _dbt_env(cfg: TidemarkConfig, target: Path) -> dict[str, str]:
    import os

    return {
        **os.environ,
        "TIDEMARK_DATA_ROOT": str(cfg.data_root),
        "DBT_PROFILES_DIR": str(DBT_PROJECT_DIR),
        "DBT_PROJECT_DIR": str(DBT_PROJECT_DIR),
        "DBT_TARGET_PATH": str(target),
        "DBT_LOG_PATH": str(target),
    }
