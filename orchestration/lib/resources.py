"""Resources, chosen in one place: tidemark's settings, Spark (dagster-pyspark), dbt."""

from __future__ import annotations

from typing import Any

from dagster import ConfigurableResource, InitResourceContext
from dagster_dbt import DbtCliResource
from dagster_pyspark import PySparkResource

from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.storage.spark import spark_conf, start_session

from orchestration.recon.project import dbt_executable, run_project_dir


class TidemarkResource(ConfigurableResource):
    """The data root a run or sensor works in (defaults to TIDEMARK_DATA_ROOT)."""

    data_root: str

    def config(self) -> TidemarkConfig:
        return TidemarkConfig.from_env().with_data_root(self.data_root)


class TidemarkSparkResource(PySparkResource):
    """dagster-pyspark's resource, fed by the factory's settings and its startup checks.

    The session starts on first use, not when the run starts: a run that never touches Spark
    (a savepoint of a job a continuous run hosts, a reconciliation through the SQL endpoint)
    starts no JVM. In one run process (the in-process executor) every step gets the same
    session. The settings come from `spark_conf` when the session starts; they are not resource
    config, so nothing of ``TIDEMARK_SPARK_CONF`` is shown in Dagster's run config.
    """

    data_root: str

    def setup_for_execution(self, context: InitResourceContext) -> None:
        pass  # lazily, see spark_session

    @property
    def spark_session(self) -> Any:
        if self._spark_session is None:
            cfg = TidemarkConfig.from_env().with_data_root(self.data_root)
            self._spark_session = start_session(cfg, spark_conf(cfg))
        return self._spark_session


def build_resources(cfg: TidemarkConfig) -> dict:
    return {
        "tidemark": TidemarkResource(data_root=str(cfg.data_root)),
        "pyspark": TidemarkSparkResource(spark_config={}, data_root=str(cfg.data_root)),
        "dbt": DbtCliResource(
            project_dir=str(run_project_dir(cfg)),
            profiles_dir=str(run_project_dir(cfg)),
            dbt_executable=dbt_executable(),
        ),
    }
