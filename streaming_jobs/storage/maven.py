"""Jars from Maven Central that are not Spark's own classpath: resolved by Spark's Ivy, cached.

Three sets of jars go through `resolve`: the Spark session's packages (Delta, the Kafka
connector, S3A; `streaming_jobs.storage.spark.resolve_packages`, at the first start), Apache
Kafka's broker (``tidemark kafka start``, a JVM of its own), and single jars that cannot go
through the session's resolution (the Kafka token provider, see
`streaming_jobs.storage.spark.kafka_token_provider`). `resolve` runs Spark's ``spark-submit``
from the pyspark wheel with ``--packages`` and a script that only writes down the jars Spark
resolved: the same Ivy, the same repositories (``spark.jars.repositories`` in
``TIDEMARK_SPARK_CONF`` names a mirror), no JVM left running. The result is a manifest in the
cache folder; later calls read it (offline)."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOG = logging.getLogger("tidemark.maven")


class ResolutionError(RuntimeError):
    """Maven coordinates could not be resolved; the message names them and what to do, and
    ``report`` holds Ivy's lines that say why."""

    def __init__(self, message: str, report: str = ""):
        super().__init__(message)
        self.report = report


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _manifest(folder: Path) -> Path:
    return folder / "resolved.json"


# where tidemark before 2026-12-01 wrote the manifest (the session's own now has that name in
# the jars cache): read, so that a cache resolved then is not resolved again (nor needs network)
LEGACY_MANIFEST = "tidemark-jars.json"


def cached(folder: Path, coordinates: list[str]) -> list[Path] | None:
    """The jars a previous `resolve` of exactly ``coordinates`` into ``folder`` gave, if all are
    still there."""
    manifest = {}
    for path in (_manifest(folder), folder / LEGACY_MANIFEST):
        try:
            manifest = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if "coordinates" in manifest:
            break
    jars = [Path(j) for j in manifest.get("jars", [])]
    if manifest.get("coordinates") != coordinates or not jars or not all(j.is_file() for j in jars):
        return None
    return jars


# Ivy's report of a module it could not resolve (``:: org#module;rev: not found``), and of a
# module whose parent POM it could not load (``Parent=org#module;rev``)
UNRESOLVED = re.compile(r"::\s+([^\s#:]+)#([^\s#;]+);([^\s:]+):\s+not found")
PARENT = re.compile(r"Parent=([^\s#]+)#([^\s#;]+);([^\s)]+)")


# a repository address's user and password (a mirror's, in spark.jars.repositories): never
# repeated in a message
USER_INFO = re.compile(r"(\w+://)[^/\s@]+@")

# the words of Ivy's lines that say what failed
REPORTED = ("not found", "UNRESOLVED", "Exception", "download failed", "Impossible to load")

# The script spark-submit runs once it has resolved: the JVM's spark.jars, to the file named
LIST_JARS = """import sys
from pyspark.java_gateway import launch_gateway

with open(sys.argv[1], "w") as out:
    out.write(launch_gateway().jvm.System.getProperty("spark.jars") or "")
"""


def transient_modules(output: str, coordinates: list[str]) -> set[tuple[str, str]] | None:
    """What a failed resolution's ``output`` says to try again, as (org, module) pairs whose
    cache entries to clear first; None when it is not worth another try: only modules asked
    for by name are missing (a wrong coordinate, or a mirror without them), which a retry
    cannot mend. A missing dependency of a module that resolved, or a failed download, is
    transient: the module's own POM names it, so the repository has it."""
    unresolved = {m.groups() for m in UNRESOLVED.finditer(output)}
    asked = {tuple(c.split(":")[:3]) for c in coordinates}
    if unresolved and unresolved <= asked and "download failed" not in output:
        return None
    return {(org, module) for org, module, _ in unresolved | set(PARENT.findall(output))}


def _escape(text: str, key: bool = False) -> str:
    """A Java properties file's escaping (backslash, line breaks; separators in keys)."""
    out = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    if key:
        for ch in (" ", "=", ":", "#", "!"):
            out = out.replace(ch, "\\" + ch)
    elif out.startswith(" "):
        out = "\\" + out
    return out


def properties_file(settings: dict[str, str], folder: str | None = None) -> str:
    """Write ``settings`` to a file only this user can read (in ``folder``, or the system's
    temporary one); returns its path. Spark reads it with ``--properties-file``: settings that
    may hold credentials never reach a command line, which every local user can read."""
    handle, path = tempfile.mkstemp(prefix="tidemark-spark-", suffix=".properties", dir=folder)
    with os.fdopen(handle, "w") as out:
        for key, value in settings.items():
            out.write(f"{_escape(key, key=True)}={_escape(value)}\n")
    return path


def resolve(
    coordinates: list[str],
    folder: Path,
    excludes: tuple[str, ...] = (),
    settings: dict[str, str] | None = None,
    timeout: float = 600,
    attempts: int = 3,
    downloads: Path | None = None,
) -> list[Path]:
    """Resolve ``coordinates`` (``group:artifact:version``) and their dependencies into
    ``folder`` (an Ivy home of their own); returns every jar, cached in a manifest. ``settings``:
    Spark's settings for Ivy (``spark.jars.repositories``: a mirror; ``spark.jars.ivySettings``),
    handed over in a private properties file. ``downloads``: Ivy's download cache, shared by
    every folder and checkout of the machine (`shared_downloads`).

    One resolution at a time per folder (an ``flock`` beside it): two processes writing one Ivy
    cache at once read each other's half-written POMs (seen: the two test workers' Kafka
    brokers, "Impossible to load parent"). A failure worth another try (`transient_modules`) is
    tried again up to ``attempts`` times in all, its modules' cache entries cleared first."""
    known = cached(folder, coordinates)
    if known is not None:
        return known
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{folder.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        known = cached(folder, coordinates)  # another process resolved it while this one waited
        if known is not None:
            return known
        with shared_downloads(folder, downloads):
            return _resolve(coordinates, folder, excludes, settings or {}, timeout, attempts)


@contextmanager
def shared_downloads(folder: Path, downloads: Path | None) -> Iterator[None]:
    """Ivy's download cache for ``folder`` is ``downloads`` (``folder/cache`` links to it), held
    under its lock while the caller resolves: a second checkout, or the Kafka broker's jars
    beside the session's, reads the POMs and jars the first downloaded instead of downloading
    them again, and no two resolutions write the shared cache at once. A folder whose cache is
    a folder of its own (resolved before) keeps it."""
    link = folder / "cache"
    if downloads is None or (link.exists() and not link.is_symlink()):
        yield
        return
    try:
        downloads.mkdir(parents=True, exist_ok=True)
        lock = open(downloads.parent / f"{downloads.name}.lock", "a")  # noqa: SIM115 - below
    except OSError as exc:  # a machine cache that cannot be written: the folder's own, as before
        LOG.warning("Ivy downloads into %s, not %s (%s)", link, downloads, exc)
        if link.is_symlink():
            link.unlink()
        yield
        return
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if link.is_symlink() and link.readlink() != downloads:
            link.unlink()  # TIDEMARK_CACHE moved
        if not link.is_symlink():
            link.symlink_to(downloads, target_is_directory=True)
        yield


def _resolve(coordinates, folder, excludes, settings, timeout, attempts) -> list[Path]:
    with tempfile.TemporaryDirectory(prefix="tidemark-resolve-") as tmp:
        # spark-submit resolves before it runs the script, which writes down the jars in the
        # order Spark puts them on the class path (its ``spark.jars``) and starts nothing
        script, listing = Path(tmp) / "list_jars.py", Path(tmp) / "jars.txt"
        script.write_text(LIST_JARS)
        home = spark_home()
        conf = {"spark.jars.ivy": str(folder), **settings}
        if excludes:
            conf["spark.jars.excludes"] = ",".join(excludes)
        command = [
            str(home / "bin" / "spark-submit"),
            "--properties-file",
            properties_file(conf, tmp),
            "--packages",
            ",".join(coordinates),
        ]
        env = {
            **os.environ,
            "SPARK_HOME": str(home),
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1",
        }
        for attempt in range(1, attempts + 1):
            done = subprocess.run(
                [*command, str(script), str(listing)],
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
            if done.returncode == 0 or attempt == attempts:
                break
            again = transient_modules(done.stdout + done.stderr, coordinates)
            if again is None:
                break
            for org, module in again:
                shutil.rmtree(folder / "cache" / org / module, ignore_errors=True)
            time.sleep(5 * attempt)
        listed = listing.read_text() if listing.is_file() else ""
    retrieved = folder / "jars"
    if done.returncode != 0 or not retrieved.is_dir():
        lines = [
            ln
            for ln in (done.stdout + done.stderr).splitlines()
            # what failed, not each repository that did not have a file or answer ("... not
            # found. url=...", "Server access error at url ...")
            if any(word in ln for word in REPORTED)
            and not any(u in ln for u in ("url=", "at url "))
        ]
        report = USER_INFO.sub(r"\1***@", "\n".join(lines[-15:]))
        raise ResolutionError(
            f"could not resolve {', '.join(coordinates)} from Maven Central into {folder}:\n"
            + report
            + "\nCheck network access to Maven Central, or name a mirror with "
            "TIDEMARK_SPARK_CONF='spark.jars.repositories=<url>', then run again.",
            report,
        )
    jars = [
        Path(j.removeprefix("file:").removeprefix("//"))
        for j in listed.split(",")
        if j.endswith(".jar")
    ]
    if not jars:  # Ivy retrieves into jars/ as <group>_<artifact>-<version>.jar
        jars = sorted(retrieved.glob("*.jar"))
    _manifest(folder).write_text(
        json.dumps({"coordinates": coordinates, "jars": [str(j) for j in jars]}, indent=2)
    )
    return jars
