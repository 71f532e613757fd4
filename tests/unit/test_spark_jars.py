"""The jars Spark gets for object stores match the Spark they run in: hadoop-aws at the version
of the Hadoop that pyspark ships, and the AWS SDK modules at the version hadoop-aws declares."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.storage.maven import spark_home
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
