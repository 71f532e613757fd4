"""The driver JVM maps the class archive `tidemark setup` built, instead of loading the classes
again (docs/benchmarks.md, "A JVM's start")."""

from __future__ import annotations

from pathlib import Path

from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.storage.spark import cached_jars, class_archive, spark_conf


def test_the_session_jvm_maps_the_archive_setup_built(spark):
    cfg = TidemarkConfig.from_env()
    archive = class_archive(cfg, cached_jars(cfg))
    assert archive is not None and archive.is_file(), (
        f"no JVM class archive in {cfg.spark.jars_cache}: 'tidemark setup' builds it (see "
        "driver-classes.log there)"
    )
    # the operating system's view of the JVM: the archive file is mapped into its memory
    pid = spark._jvm.java.lang.ProcessHandle.current().pid()
    maps = Path(f"/proc/{pid}/maps").read_text()
    assert str(archive) in maps
    # every tidemark JVM gets it (dbt's and the SQL endpoint's settings come from here too)
    for hive in (False, True):
        options = spark_conf(cfg, hive_metastore=hive)["spark.driver.extraJavaOptions"]
        assert f"-XX:SharedArchiveFile={archive}" in options.split()
