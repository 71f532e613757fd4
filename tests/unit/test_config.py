"""Settings from the environment, the factory's Spark settings, and its startup messages."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from streaming_jobs.core.config import ConfigError, TidemarkConfig
from streaming_jobs.storage.spark import (
    DELTA_PACKAGE,
    KAFKA_PACKAGE,
    S3A_PACKAGES,
    SparkStartupError,
    check_java,
    spark_conf,
)


def test_defaults_work_on_a_laptop(tmp_path):
    cfg = TidemarkConfig.from_env({})
    assert cfg.spark.master == "local[2]"
    assert cfg.data_root.name == "data" and cfg.data_root.parent.name == ".tidemark"
    conf = spark_conf(cfg.with_data_root(tmp_path))
    assert conf["spark.sql.shuffle.partitions"] == "2"  # one per core of local[2]
    assert conf["spark.ui.enabled"] == "false"
    assert conf["spark.sql.streaming.stateStore.providerClass"].endswith(
        "RocksDBStateStoreProvider"
    )
    assert conf["spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"] == "true"
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert conf["spark.sql.catalogImplementation"] == "in-memory"
    assert conf["spark.sql.warehouse.dir"].startswith(str(tmp_path))


def test_master_and_any_setting_come_from_the_environment(tmp_path):
    cfg = TidemarkConfig.from_env(
        {
            "TIDEMARK_SPARK_MASTER": "spark://127.0.0.1:7077",
            "TIDEMARK_SPARK_CONF": "spark.executor.memory=2g; spark.sql.shuffle.partitions=8",
            "TIDEMARK_SPARK_UI": "1",
            "TIDEMARK_DATA_ROOT": str(tmp_path),
        }
    )
    conf = spark_conf(cfg)
    assert conf["spark.master"] == "spark://127.0.0.1:7077"
    assert conf["spark.executor.memory"] == "2g"
    assert conf["spark.sql.shuffle.partitions"] == "8"  # explicit settings win
    assert conf["spark.ui.enabled"] == "true"
    assert cfg.data_root == tmp_path.resolve()


@pytest.mark.parametrize(
    "master, partitions",
    [
        ("local[2]", 2),
        ("local[8]", 8),
        ("local[3, 2]", 3),  # local[cores, max failures]
        ("local", 1),
        ("local[*]", os.cpu_count()),
        ("spark://127.0.0.1:7077", 4),  # a cluster's cores are not known from its address
        ("local-cluster[2, 1, 1024]", 4),
    ],
)
def test_state_partitions_default_to_the_local_masters_cores(master, partitions):
    cfg = TidemarkConfig.from_env({"TIDEMARK_SPARK_MASTER": master})
    assert cfg.spark.shuffle_partitions == partitions
    assert spark_conf(cfg)["spark.sql.shuffle.partitions"] == str(partitions)
    # a setting wins over the derived default
    env = {"TIDEMARK_SPARK_MASTER": master, "TIDEMARK_SHUFFLE_PARTITIONS": "6"}
    assert TidemarkConfig.from_env(env).spark.shuffle_partitions == 6


def test_dbt_process_gets_a_derby_metastore_under_the_data_root(tmp_path):
    conf = spark_conf(
        TidemarkConfig.from_env({"TIDEMARK_DATA_ROOT": str(tmp_path)}), hive_metastore=True
    )
    assert conf["spark.sql.catalogImplementation"] == "hive"
    # generated code for every statement (interpreted sorts and windows are slow at scale)
    assert "spark.sql.codegen.factoryMode" not in conf
    assert (
        str(tmp_path / "dbt" / "metastore_db")
        in conf["spark.hadoop.javax.jdo.option.ConnectionURL"]
    )


def test_jars_come_from_the_cache_once_resolved(tmp_path):
    cache = tmp_path / "ivy"
    cfg = TidemarkConfig.from_env(
        {"TIDEMARK_JARS_CACHE": str(cache), "TIDEMARK_DATA_ROOT": str(tmp_path)}
    )
    conf = spark_conf(cfg)
    wanted = [DELTA_PACKAGE, KAFKA_PACKAGE, *S3A_PACKAGES]
    assert conf["spark.jars.packages"] == ",".join(wanted)
    assert "spark.jars" not in conf
    jar = cache / "jars" / "delta.jar"
    jar.parent.mkdir(parents=True)
    jar.write_bytes(b"")
    (cache / "tidemark-jars.json").write_text(json.dumps({"packages": wanted, "jars": [str(jar)]}))
    conf = spark_conf(cfg)
    assert conf["spark.jars"] == str(jar) and "spark.jars.packages" not in conf


def test_kafka_settings_and_their_secrets_stay_out_of_reprs(tmp_path):
    from streaming_jobs.storage.kafka import client_config, spark_options

    cfg = TidemarkConfig.from_env(
        {
            "TIDEMARK_DATA_ROOT": str(tmp_path),
            "TIDEMARK_SOURCE": "kafka",
            "TIDEMARK_KAFKA_PORT": "19999",
            "TIDEMARK_KAFKA_MAX_OFFSETS_PER_TRIGGER": "1000",
            "TIDEMARK_KAFKA_CONF": "security.protocol=SASL_SSL;sasl.jaas.config=pw-s3cret",
            "TIDEMARK_KAFKA_CLIENT_CONF": "sasl.password=pw-s3cret",
        }
    )
    assert cfg.kafka.source == "kafka" and cfg.kafka.bootstrap == "127.0.0.1:19999"
    options = spark_options(cfg, "tidemark.orders")
    assert (
        options["kafka.sasl.jaas.config"] == "pw-s3cret"
        and options["subscribe"] == "tidemark.orders"
        and options["maxOffsetsPerTrigger"] == "1000"
    )
    assert options["failOnDataLoss"] == "true" and options["startingOffsets"] == "earliest"
    assert client_config(cfg)["sasl.password"] == "pw-s3cret"
    assert "s3cret" not in repr(cfg)
    conf = spark_conf(cfg)
    import re

    assert re.search(conf["spark.sql.redaction.options.regex"], "kafka.sasl.jaas.config")


def test_a_standalone_master_gets_what_executors_in_other_jvms_need(tmp_path):
    local = spark_conf(TidemarkConfig.from_env({"TIDEMARK_DATA_ROOT": str(tmp_path)}))
    assert "spark.cores.max" not in local and "spark.executorEnv.PYTHONPATH" not in local
    cfg = TidemarkConfig.from_env(
        {
            "TIDEMARK_DATA_ROOT": str(tmp_path),
            "TIDEMARK_SPARK_MASTER": "spark://127.0.0.1:7077",
            "TIDEMARK_JOBS_PATH": str(tmp_path / "my_jobs"),
            "TIDEMARK_SPARK_CONF": "spark.executor.memory=4g",
        }
    )
    conf = spark_conf(cfg)
    assert conf["spark.master"] == "spark://127.0.0.1:7077"
    assert "-Duser.timezone=UTC" in conf["spark.executor.extraJavaOptions"]
    # the executors' Python workers import the project and the user's job folders
    path = conf["spark.executorEnv.PYTHONPATH"].split(":")
    assert str(Path(__file__).resolve().parents[2]) in path and str(tmp_path / "my_jobs") in path
    assert conf["spark.cores.max"] == "2" and conf["spark.executor.cores"] == "1"
    assert conf["spark.executor.memory"] == "4g"  # the user's setting wins


@pytest.mark.parametrize(
    "env,needle",
    [
        ({"TIDEMARK_SOURCE": "files"}, "TIDEMARK_SOURCE='files' is not one of landing, kafka"),
        ({"TIDEMARK_KAFKA_PORT": "70000"}, "TIDEMARK_KAFKA_PORT=70000 is not a TCP port"),
        ({"TIDEMARK_CLUSTER_PORT": "70000"}, "TIDEMARK_CLUSTER_PORT=70000 is not a TCP port"),
        (
            {"TIDEMARK_CLUSTER_WORKER_MEMORY": "lots"},
            "TIDEMARK_CLUSTER_WORKER_MEMORY='lots': use a size like 3g",
        ),
        ({"TIDEMARK_CLUSTER_WORKERS": "0"}, "TIDEMARK_CLUSTER_WORKERS"),
        (
            {"TIDEMARK_KAFKA_CONF": "no-equals"},
            "TIDEMARK_KAFKA_CONF: cannot read its setting number 1",
        ),
        ({"TIDEMARK_SPARK_CONF": "no-equals-sign"}, "TIDEMARK_SPARK_CONF"),
        ({"TIDEMARK_SHUFFLE_PARTITIONS": "zero"}, "TIDEMARK_SHUFFLE_PARTITIONS"),
        ({"TIDEMARK_STALL_SECONDS": "nan"}, "TIDEMARK_STALL_SECONDS='nan' is not a finite number"),
        ({"TIDEMARK_IDLE_SECONDS": "inf"}, "TIDEMARK_IDLE_SECONDS='inf' is not a finite number"),
        (
            {"TIDEMARK_SAVEPOINTS_KEEP": "0"},
            "TIDEMARK_SAVEPOINTS_KEEP='0' is not a whole number of at least 1",
        ),
        ({"TIDEMARK_ALERT_RETRY_SECONDS": "soon"}, "TIDEMARK_ALERT_RETRY_SECONDS"),
        ({"TIDEMARK_MAX_CONCURRENT_RUNS": "0"}, "TIDEMARK_MAX_CONCURRENT_RUNS"),
        (
            {"TIDEMARK_UNBOUNDED_STATE": "ignore"},
            "TIDEMARK_UNBOUNDED_STATE='ignore': use refuse or warn",
        ),
        (
            {"TIDEMARK_LANDING_RETENTION": "shred"},
            "TIDEMARK_LANDING_RETENTION='shred' is not one of archive, delete, keep",
        ),
        ({"TIDEMARK_MAINTENANCE_CRON": "daily"}, "TIDEMARK_MAINTENANCE_CRON='daily' is not a cron"),
        (
            {"TIDEMARK_VACUUM_RETAIN_HOURS": "-1"},
            "TIDEMARK_VACUUM_RETAIN_HOURS='-1' is not a finite",
        ),
        ({"TIDEMARK_SQL_ENDPOINT": "thrift.internal"}, "is not host:port"),
        ({"TIDEMARK_SQL_ENDPOINT": "thrift.internal:99999"}, "is not host:port"),
        (
            {"TIDEMARK_SQL_ENDPOINT": "thrift.internal:10000"},
            "several data roots share: set TIDEMARK_DBT_SCHEMA_PREFIX",
        ),
        ({"TIDEMARK_DBT_SCHEMA_PREFIX": "Team-A"}, "TIDEMARK_DBT_SCHEMA_PREFIX='Team-A': use"),
        ({"TIDEMARK_S3_ENDPOINT": "s3.example.com"}, "is not http\\(s\\)://host"),
        ({"TIDEMARK_S3_PATH_STYLE": "yes"}, "TIDEMARK_S3_PATH_STYLE='yes': use 1"),
        ({"TIDEMARK_S3_ACCESS_KEY_ID": "AKIA0"}, "go together: set both"),
        ({"TIDEMARK_S3_PORT": "0"}, "TIDEMARK_S3_PORT"),
    ],
)
def test_malformed_settings_name_the_variable(env, needle):
    with pytest.raises(ConfigError, match=needle):
        TidemarkConfig.from_env(env)


def test_missing_java_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SparkStartupError, match="Java 17.*apt-get install openjdk-17"):
        check_java()
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    assert check_java() == str(java)


def test_the_settings_reference_is_generated_from_the_code_and_covers_every_variable():
    """docs/configuration.md's table is `tidemark settings --write`'s rendering (defaults read
    from TidemarkConfig), and every TIDEMARK_* variable the code reads is in it or internal."""
    import re

    from streaming_jobs.core.config import CHECKOUT
    from streaming_jobs.core.settings import BEGIN, END, INTERNAL, SETTINGS, render

    text = (CHECKOUT / "docs" / "configuration.md").read_text()
    assert text[text.index(BEGIN) : text.index(END) + len(END)] == render(), (
        "run: tidemark settings --write"
    )
    read = set()
    for folder in ("streaming_jobs", "orchestration"):
        for path in (CHECKOUT / folder).rglob("*.py"):
            read |= set(re.findall(r'"(TIDEMARK_[A-Z0-9_]+)"', path.read_text()))
    assert read - INTERNAL == {s.name for s in SETTINGS}
    # a default the table shows is what an empty environment gives
    assert "| `TIDEMARK_SQL_PORT` | `10000` |" in render()
    assert "| `TIDEMARK_STALL_SECONDS` | `900` |" in render()


def test_object_store_keys_stay_out_of_reprs_and_the_own_server_is_recognised():
    from streaming_jobs.core.stores import Keys

    cfg = TidemarkConfig.from_env(
        {
            "TIDEMARK_S3_ACCESS_KEY_ID": "AKIAEXAMPLEKEY",
            "TIDEMARK_S3_SECRET_ACCESS_KEY": "example-secret-value",
        }
    )
    shown = repr(cfg) + repr(Keys(cfg.s3.access_key_id, cfg.s3.secret_access_key))
    assert "AKIAEXAMPLEKEY" not in shown and "example-secret-value" not in shown
    assert cfg.s3.own_server and cfg.s3.endpoint == "http://127.0.0.1:8333"
    theirs = TidemarkConfig.from_env({"TIDEMARK_S3_ENDPOINT": "https://s3.eu-west-1.amazonaws.com"})
    assert not theirs.s3.own_server
    moved = TidemarkConfig.from_env({"TIDEMARK_S3_PORT": "9444"})
    assert moved.s3.own_server and moved.s3.endpoint == "http://127.0.0.1:9444"


def test_a_data_root_on_a_store_puts_the_data_there_and_working_state_on_this_disk(tmp_path):
    from streaming_jobs.core.locations import Location

    local = TidemarkConfig.from_env({"TIDEMARK_DATA_ROOT": str(tmp_path / "d")})
    # a local root: data and working state in one folder, plain paths, as ever
    assert local.paths.table("ops", "alerts") == tmp_path / "d" / "lake" / "ops" / "alerts"
    assert local.paths.dbt == local.paths.logs.parent / "dbt" == tmp_path / "d" / "dbt"
    assert not local.on_store and local.work_root == tmp_path / "d"

    store = local.with_data_root("s3a://lake-bucket/teams/orders/")
    assert store.on_store and store.data_root == Location("s3://lake-bucket/teams/orders")
    table = store.paths.table("gold", "zone_revenue_hourly")
    assert (table.url, table.spark) == (
        "s3://lake-bucket/teams/orders/lake/gold/zone_revenue_hourly",
        "s3a://lake-bucket/teams/orders/lake/gold/zone_revenue_hourly",
    )
    assert str(store.paths.checkpoint("q")) == "s3://lake-bucket/teams/orders/checkpoints/q"
    assert str(store.paths.warehouse) == "s3://lake-bucket/teams/orders/dbt/warehouse"
    # what only this machine needs stays on its disk, one folder per bucket and prefix
    for local_place in (store.paths.dbt, store.paths.dagster_home, store.paths.logs):
        assert isinstance(local_place, Path)
        assert local_place.parent.parts[-3:] == ("work", "lake-bucket", "teams_orders")
    assert store.with_data_root(tmp_path).paths.lake == tmp_path / "lake"


def test_a_data_root_of_another_scheme_is_refused_by_name():
    for other in ("abfss://c@acct.dfs.core.windows.net/x", "gs://b/x", "s3://"):
        with pytest.raises(ConfigError, match="TIDEMARK_DATA_ROOT"):
            TidemarkConfig.from_env({"TIDEMARK_DATA_ROOT": other})


def test_a_place_named_by_url_alone_follows_every_store_variable(monkeypatch):
    """`locations` caches the store settings per value of the variables in `STORE_VARIABLES`:
    one the parser reads but the list lacks would be cached past a change."""
    import inspect
    import re

    from streaming_jobs.core import store_settings
    from streaming_jobs.core.locations import Location

    read = set(
        re.findall(r"TIDEMARK_[A-Z0-9_]+", inspect.getsource(store_settings._object_store_settings))
    )
    assert read == set(store_settings.STORE_VARIABLES)
    monkeypatch.setenv("TIDEMARK_S3_REGION", "eu-west-7")
    assert Location.of("s3://b/k").s3.region == "eu-west-7"
    monkeypatch.setenv("TIDEMARK_S3_REGION", "ap-south-9")
    assert Location.of("s3://b/k").s3.region == "ap-south-9"
