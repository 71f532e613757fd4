"""Jars from Maven Central that are not Spark's own classpath: resolved by Spark's Ivy, cached.

The Spark session resolves its packages itself (`streaming_jobs.storage.spark`). Two other sets of jars
are needed outside a session: Apache Kafka's broker (``tidemark kafka start``), a JVM of its own,
and single jars that cannot go through the session's resolution (the Kafka token provider, see
`streaming_jobs.storage.spark.kafka_token_provider`). `resolve` runs Spark's ``spark-submit`` from the
pyspark wheel with ``--packages`` and a script that does nothing: the same Ivy, the same
repositories (``spark.jars.repositories`` in ``TIDEMARK_SPARK_CONF`` names a mirror), no JVM
left running. The result is a manifest in the cache folder; later calls read it (offline).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


class ResolutionError(RuntimeError):
    """Maven coordinates could not be resolved; the message names them and what to do."""


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _manifest(folder: Path) -> Path:
    return folder / "tidemark-jars.json"


def cached(folder: Path, coordinates: list[str]) -> list[Path] | None:
    """The jars a previous `resolve` of exactly ``coordinates`` into ``folder`` gave, if all are
    still there."""
    try:
        manifest = json.loads(_manifest(folder).read_text())
    except (OSError, ValueError):
        return None
    jars = [Path(j) for j in manifest.get("jars", [])]
    if manifest.get("coordinates") != coordinates or not jars or not all(j.is_file() for j in jars):
        return None
    return jars


def resolve(
    coordinates: list[str],
    folder: Path,
    excludes: tuple[str, ...] = (),
    repositories: str | None = None,
    timeout: float = 600,
) -> list[Path]:
    """Resolve ``coordinates`` (``group:artifact:version``) and their dependencies into
    ``folder`` (an Ivy home of their own); returns every jar, cached in a manifest."""
    known = cached(folder, coordinates)
    if known is not None:
        return known
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tidemark-resolve-") as tmp:
        noop = Path(tmp) / "noop.py"
        noop.write_text("")  # spark-submit resolves before it runs the script; nothing to run
        home = spark_home()
        command = [
            str(home / "bin" / "spark-submit"),
            "--packages",
            ",".join(coordinates),
            "--conf",
            f"spark.jars.ivy={folder}",
        ]
        if excludes:
            command += ["--conf", "spark.jars.excludes=" + ",".join(excludes)]
        if repositories:
            command += ["--conf", f"spark.jars.repositories={repositories}"]
        env = {
            **os.environ,
            "SPARK_HOME": str(home),
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1",
        }
        for attempt in range(3):  # Ivy gives up on a jar at its first failed download
            done = subprocess.run(
                [*command, str(noop)],
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
            if done.returncode == 0 or "download failed" not in done.stdout + done.stderr:
                break
            time.sleep(5 * (attempt + 1))
    retrieved = folder / "jars"
    if done.returncode != 0 or not retrieved.is_dir():
        lines = [
            ln
            for ln in (done.stdout + done.stderr).splitlines()
            if "not found" in ln or "UNRESOLVED" in ln or "Exception" in ln
        ]
        raise ResolutionError(
            f"could not resolve {', '.join(coordinates)} from Maven Central into {folder}:\n"
            + "\n".join(lines[-15:])
            + "\nCheck network access to Maven Central, or name a mirror with "
            "TIDEMARK_SPARK_CONF='spark.jars.repositories=<url>', then run again."
        )
    # Ivy retrieves into jars/ as <group>_<artifact>-<version>.jar: everything there is this
    # resolution's (the folder is its own Ivy home)
    jars = sorted(retrieved.glob("*.jar"))
    _manifest(folder).write_text(
        json.dumps({"coordinates": coordinates, "jars": [str(j) for j in jars]}, indent=2)
    )
    return jars
