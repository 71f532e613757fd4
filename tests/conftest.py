"""Shared fixtures: one SparkSession for the whole session, one data root per test.

Helpers that are not fixtures (landing hand-made events, running tidemark-dbt) are in
``tests/helpers.py``; ``tests/`` is on the import path (pyproject's pytest settings).
"""

from __future__ import annotations

import pytest

from streaming_jobs.config import TidemarkConfig
from streaming_jobs.generator import GeneratorConfig, generate


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from streaming_jobs.spark import get_spark

    root = tmp_path_factory.mktemp("session-root")
    session = get_spark(TidemarkConfig.from_env().with_data_root(root))
    yield session
    session.stop()


@pytest.fixture
def cfg(tmp_path, monkeypatch) -> TidemarkConfig:
    """A TidemarkConfig on a fresh data root, also exported for subprocesses (dbt)."""
    root = tmp_path / "data"
    root.mkdir()
    monkeypatch.setenv("TIDEMARK_DATA_ROOT", str(root))
    return TidemarkConfig.from_env().with_data_root(root)


@pytest.fixture
def sample(cfg) -> tuple[GeneratorConfig, list[list[str]]]:
    """A small generated sample (not yet written)."""
    gen = GeneratorConfig(events=3000, files=3, seed=11)
    return gen, generate(gen)


@pytest.fixture(autouse=True)
def _no_dagster_home_leak(tmp_path, monkeypatch):
    # Dagster code under test must never touch a developer's real Dagster home.
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    (tmp_path / "dagster_home").mkdir(exist_ok=True)


@pytest.fixture(autouse=True)
def _strict_settings_after_each_test():
    # Loading the code location turns on tolerant settings for the process (a malformed
    # variable takes its default and is alerted); each test starts strict and clean again.
    yield
    from streaming_jobs.config import tolerate_bad_settings

    tolerate_bad_settings(False)
