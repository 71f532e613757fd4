"""The resources, chosen in one place (`orchestration.resources`), for the data root in
``TIDEMARK_DATA_ROOT``."""

import dagster as dg

from streaming_jobs.config import TidemarkConfig

from orchestration.resources import build_resources


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions(resources=build_resources(TidemarkConfig.from_env()))
