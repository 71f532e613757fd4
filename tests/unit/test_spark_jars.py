"""The jars Spark gets for object stores match the Spark they run in: hadoop-aws at the version
of the Hadoop that pyspark ships, and the AWS SDK modules at the version hadoop-aws declares."""

from __future__ import annotations

import fcntl
import json
import re
import subprocess
import threading
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.storage import maven
from streaming_jobs.storage.maven import spark_home, transient_modules
from streaming_jobs.storage.spark import AWS_SDK_VERSION, HADOOP_VERSION, S3A_PACKAGES, packages


def test_hadoop_aws_is_the_hadoop_pyspark_ships():
    shipped = {
        m.group(1)
        for jar in (spark_home() / "jars").glob("hadoop-client-api-*.jar")
        if (m := re.fullmatch(r"hadoop-client-api-(.+)\.jar", jar.name))
    }
    assert shipped == {HADOOP_VERSION}
    assert f"org.apache.hadoop:hadoop-aws:{HADOOP_VERSION}" in S3A_PACKAGES


def test_the_sdk_modules_are_at_the_version_hadoop_aws_declares():
    cfg = TidemarkConfig.from_env()
    assert set(S3A_PACKAGES) <= set(packages(cfg))
    # the POM Ivy resolved (make setup, which `make test` runs first), as Ivy recorded it
    ivy = cfg.spark.jars_cache / "cache" / "org.apache.hadoop" / "hadoop-aws"
    declared = {
        dep.get("name"): dep.get("rev")
        for dep in ET.parse(ivy / f"ivy-{HADOOP_VERSION}.xml").getroot().iter("dependency")
        if dep.get("org") == "software.amazon.awssdk"
    }
    assert declared == {"bundle": AWS_SDK_VERSION}
    assert all(p.endswith(f":{AWS_SDK_VERSION}") for p in S3A_PACKAGES if "awssdk" in p)


# Ivy's output when the two test workers' Kafka brokers resolved into one cache at once (CI,
# 2026-12-01): a dependency's parent POM half-written by the other process
RACED = """\
\tio problem while parsing ivy file: https://repo1.maven.org/maven2/commons-collections/\
commons-collections/3.2.2/commons-collections-3.2.2.pom (java.io.IOException: Impossible to \
load parent for file:/x/ivy/kafka-broker/cache/commons-collections/commons-collections/\
ivy-3.2.2.xml.original. Parent=org.apache.commons#commons-parent;39)
\t\tmodule not found: commons-collections#commons-collections;3.2.2
\t\t::          UNRESOLVED DEPENDENCIES         ::
\t\t:: commons-collections#commons-collections;3.2.2: not found
Exception in thread "main" java.lang.RuntimeException: [unresolved dependency: \
commons-collections#commons-collections;3.2.2: not found]
"""
BROKER = ["org.apache.kafka:kafka_2.13:4.1.1"]


def test_a_dependency_that_did_not_resolve_is_tried_again_with_its_cache_entries_cleared():
    assert transient_modules(RACED, BROKER) == {
        ("commons-collections", "commons-collections"),
        ("org.apache.commons", "commons-parent"),
    }
    assert transient_modules("[download failed: a#b;1!b.jar]", BROKER) == set()


def test_a_module_asked_for_by_name_that_is_missing_is_not_tried_again():
    missing = "\t\t:: io.tidemark.missing#no-such-artifact_2.13;0.0.1: not found\n"
    asked = ["io.tidemark.missing:no-such-artifact_2.13:0.0.1", *BROKER]
    assert transient_modules(missing, asked) is None
    # with a transient failure beside it, it is worth one more try
    assert transient_modules(missing + RACED, asked) is not None


def test_a_resolution_waits_for_one_under_way_into_the_same_folder(tmp_path, monkeypatch):
    folder = tmp_path / "kafka-broker"
    jar = tmp_path / "k.jar"
    ran = []
    monkeypatch.setattr(maven.subprocess, "run", lambda *a, **k: ran.append(a))
    with open(tmp_path / "kafka-broker.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        result = []
        waiting = threading.Thread(target=lambda: result.append(maven.resolve(BROKER, folder)))
        waiting.start()
        waiting.join(1.0)
        assert waiting.is_alive() and not result  # blocked on the other resolution
        # what the other process's resolution leaves: the jar and the manifest naming it
        jar.write_bytes(b"")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "resolved.json").write_text(
            json.dumps({"coordinates": BROKER, "jars": [str(jar)]})
        )
    waiting.join(10.0)
    assert result == [[jar]] and ran == []  # read from the manifest: no resolution of its own


def test_a_cache_resolved_by_an_earlier_tidemark_is_read_where_it_wrote_its_manifest(tmp_path):
    folder, jar = tmp_path / "kafka-broker", tmp_path / "k.jar"
    folder.mkdir()
    jar.write_bytes(b"")
    (folder / "tidemark-jars.json").write_text(
        json.dumps({"coordinates": BROKER, "jars": [str(jar)]})
    )
    assert maven.cached(folder, BROKER) == [jar]
    assert maven.cached(folder, [*BROKER, "a:b:1"]) is None


def test_ivy_settings_reach_spark_submit_in_a_private_file_not_on_its_command_line(
    tmp_path, monkeypatch
):
    mirror = "https://user:s3cret@mirror.example/maven"
    seen = []

    def spark_submit(command, **_):
        at = command.index("--properties-file") + 1
        path = Path(command[at])
        seen.append((command, path.read_text(), path.stat().st_mode & 0o777))
        out = (
            f"Server access error at url {mirror}/io/none.pom (java.net.ConnectException)\n"
            ":: io.tidemark.missing#none;1: not found\n"
            f"Exception in thread main: {mirror} refused\n"
        )
        return subprocess.CompletedProcess(command, 1, out, "")

    monkeypatch.setattr(maven.subprocess, "run", spark_submit)
    with pytest.raises(maven.ResolutionError) as raised:
        maven.resolve(
            ["io.tidemark.missing:none:1"],
            tmp_path / "ivy",
            settings={"spark.jars.repositories": mirror},
        )
    [(command, text, mode)] = seen  # a module asked for by name: not tried again
    assert not any("s3cret" in arg for arg in command) and mode == 0o600
    assert f"spark.jars.repositories={mirror}\n" in text
    assert f"spark.jars.ivy={tmp_path / 'ivy'}\n" in text
    assert "io.tidemark.missing#none;1: not found" in raised.value.report
    # the report keeps what failed, without the mirror's password or each address tried
    assert "s3cret" not in str(raised.value) and "Server access error" not in str(raised.value)
    assert "https://***@mirror.example/maven refused" in raised.value.report


def test_every_folder_downloads_through_the_machines_one_cache_one_resolution_at_a_time(
    tmp_path, monkeypatch
):
    downloads = tmp_path / "machine" / "ivy-downloads"
    lock = downloads.parent / "ivy-downloads.lock"
    events = []

    def spark_submit(command, **_):
        """Ivy as spark-submit runs it: downloads into <spark.jars.ivy>/cache, retrieves into
        <spark.jars.ivy>/jars, and Spark's class path is written down by the script."""
        text = Path(command[command.index("--properties-file") + 1]).read_text()
        ivy = Path(re.search(r"^spark\.jars\.ivy=(.*)$", text, re.M).group(1))
        with open(lock, "a") as probe:  # are the machine's downloads held while it runs?
            try:
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held = False
            except BlockingIOError:
                held = True
        pom = ivy / "cache" / "org.apache.kafka" / "kafka_2.13" / "ivy-4.1.1.xml"
        events.append(("before" if pom.is_file() else "now", ivy.name, held))
        pom.parent.mkdir(parents=True, exist_ok=True)
        pom.write_text("<ivy-module/>")
        (ivy / "jars").mkdir(exist_ok=True)
        jar = ivy / "jars" / "org.apache.kafka_kafka_2.13-4.1.1.jar"
        jar.write_bytes(b"")
        Path(command[-1]).write_text(f"file:{jar}")
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(maven.subprocess, "run", spark_submit)
    own = tmp_path / "checkout-b" / "ivy" / "kafka-broker"
    (own / "cache").mkdir(parents=True)  # resolved before this change: its own cache, kept
    for folder in (tmp_path / "checkout-a" / "ivy" / "kafka-broker", own, tmp_path / "c"):
        assert maven.resolve(BROKER, folder, downloads=downloads) == [
            folder / "jars" / "org.apache.kafka_kafka_2.13-4.1.1.jar"
        ]
    assert events == [
        ("now", "kafka-broker", True),  # the first checkout fills the machine's cache
        ("now", "kafka-broker", False),  # a folder with a cache of its own keeps it
        ("before", "c", True),  # any other folder reads what the first downloaded
    ]
    assert (tmp_path / "c" / "cache").resolve() == downloads and not (own / "cache").is_symlink()
    # a machine cache that cannot be made (here under a file): the folder's own, as before
    (tmp_path / "a-file").write_text("")
    folder = tmp_path / "d"
    assert maven.resolve(BROKER, folder, downloads=tmp_path / "a-file" / "ivy-downloads")
    assert events[-1] == ("now", "d", False) and not (folder / "cache").is_symlink()
