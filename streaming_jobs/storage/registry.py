"""The registries: every stream and every job tidemark knows, from one place.

Jobs come from the package `streaming_jobs.jobs` and from the folders in ``TIDEMARK_JOBS_PATH``
(separated by ``:``), where a team keeps its own jobs outside the checkout. A job is one file:

- a Python module with a docstring, a pure ``build`` and a ``SPEC`` (`JobSpec`), or
- a SQL file: a header of ``-- key: value`` lines (the spec) above one Spark SQL query over
  the source's events (see `streaming_jobs.storage.sql_jobs`).

A module in those folders may also declare streams (``STREAM`` or ``STREAMS``, `StreamSchema`):
a landing folder of JSON lines with its schema. The runner, the Dagster assets and the
generated dbt models all pick them up from `registry()` and `streams()`.

Each file loads on its own (`catalogue`): one that fails is left out as a `LoadProblem` naming
the file (and line), and everything else loads; so does a job the cached `tidemark check`
refused. `load_problems()` lists them: the health sensor alerts on each.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import pkgutil
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType

from streaming_jobs import jobs as builtin_jobs
from streaming_jobs.core.versions import LOADED_TEXT, loaded_code
from streaming_jobs.schemas import STREAMS, StreamSchema
from streaming_jobs.spec import JobSpec

PACKAGE_DIR = Path(builtin_jobs.__file__).resolve().parent


def _package_modules():
    for info in pkgutil.iter_modules(builtin_jobs.__path__):
        name = f"{builtin_jobs.__name__}.{info.name}"
        yield name, importlib.import_module(name)


def job_folders() -> list[Path]:
    """The folders of ``TIDEMARK_JOBS_PATH`` (`TidemarkConfig.jobs_path`), checked."""
    from streaming_jobs.core.config import TidemarkConfig

    folders = []
    for path in TidemarkConfig.from_env().jobs_path:
        if not path.is_dir():
            raise FileNotFoundError(
                f"TIDEMARK_JOBS_PATH names {path}, which is not a folder; fix the variable"
            )
        folders.append(path)
    return folders


def _files(suffix: str) -> list[Path]:
    return [f for folder in job_folders() for f in sorted(folder.glob(f"*{suffix}"))]


# Loaded user modules by file and modification time: a module runs once per version of its file.
_LOADED: dict[tuple[str, float], ModuleType] = {}


@dataclass(frozen=True)
class LoadProblem:
    """A job or stream file that could not be loaded (or a job refused by `tidemark check`).

    The file is left out and everything else loads: its jobs do not run, the health sensor
    raises a ``job_file`` alert naming the file, and `tidemark check` prints it."""

    file: str
    message: str
    job: str | None = None

    @property
    def subject(self) -> str:
        """Who the alert is about: the job, or the file's stem."""
        return self.job or Path(self.file.split(":")[0]).stem

    def __str__(self) -> str:
        return self.message if self.file in self.message else f"{self.file}: {self.message}"


@dataclass(frozen=True)
class Catalogue:
    streams: dict[str, StreamSchema]
    jobs: dict[str, JobSpec]
    problems: tuple[LoadProblem, ...]


def _module(file: Path) -> ModuleType:
    key = (str(file), file.stat().st_mtime)
    if key not in _LOADED:
        spec = importlib.util.spec_from_file_location(f"tidemark_user_jobs.{file.stem}", file)
        module = importlib.util.module_from_spec(spec)
        # the file read once: the code run and the text its version is taken from are one
        # (`versions.loaded_code`), whenever the file is saved again
        text = importlib.util.decode_source(file.read_bytes())
        module.__dict__[LOADED_TEXT] = text
        exec(compile(text, str(file), "exec"), module.__dict__)  # (what the import system does)
        _LOADED[key] = module
    return _LOADED[key]


def _streams(modules, problems: list[LoadProblem]) -> dict[str, StreamSchema]:
    known, where = dict(STREAMS), {name: "streaming_jobs/schemas.py" for name in STREAMS}
    for origin, module in modules:
        declared = getattr(module, "STREAMS", None) or [getattr(module, "STREAM", None)]
        for stream in declared:
            if not isinstance(stream, StreamSchema):
                continue
            if stream.name in known:
                problems.append(
                    LoadProblem(
                        origin,
                        (
                            f"{origin}: stream {stream.name!r} is already declared in "
                            f"{where[stream.name]}; rename one of them (this one is left out)"
                        ),
                    )
                )
                continue
            known[stream.name], where[stream.name] = stream, origin
    return known


def catalogue(analysed: bool = True) -> Catalogue:
    """Every stream and job that loads, and a `LoadProblem` for each file that does not.

    Each file is loaded on its own: a module that fails to import, a SQL job with a bad header,
    a name declared twice (the later file is left out), a job reading an unknown stream, and
    (``analysed``) a job the cached `tidemark check` refused are reported; the rest load."""
    from streaming_jobs.storage.sql_jobs import load_sql_job

    problems: list[LoadProblem] = []
    modules = []
    try:
        py_files, sql_files = _files(".py"), _files(".sql")
    except FileNotFoundError as exc:
        problems.append(LoadProblem("TIDEMARK_JOBS_PATH", str(exc)))
        py_files, sql_files = [], []
    for file in py_files:
        try:
            modules.append((str(file), _module(file)))
        except Exception as exc:  # any error of a user's module: report it, load the rest
            problems.append(
                LoadProblem(
                    str(file),
                    (
                        f"job module {file} failed to load: {type(exc).__name__}: {exc}; fix the file "
                        "(`tidemark check` shows every problem)"
                    ),
                )
            )
    known = _streams(modules, problems)
    found: list[tuple[str, JobSpec]] = []
    for origin, module in [*_package_modules(), *modules]:
        spec = getattr(module, "SPEC", None)
        if isinstance(spec, JobSpec):
            found.append((getattr(module, "__file__", None) or origin, spec))
    for file in [*sorted(PACKAGE_DIR.glob("*.sql")), *sql_files]:
        try:
            found.append((str(file), load_sql_job(file, known)))
        except Exception as exc:  # JobFileError names file and line; anything else, the file
            message = str(exc) if str(file) in str(exc) else f"SQL job {file}: {exc}"
            problems.append(LoadProblem(str(file), message))
    specs: dict[str, JobSpec] = {}
    for origin, spec in found:
        if spec.name in specs:
            problems.append(
                LoadProblem(
                    origin,
                    (
                        f"{origin}: job name {spec.name!r} is already declared in "
                        f"{specs[spec.name].origin}; rename one of them (this one is left out)"
                    ),
                )
            )
            continue
        unknown = [s for s in spec.sources if s not in known]
        if unknown:
            problems.append(
                LoadProblem(
                    origin,
                    (
                        f"{origin}: job {spec.name} reads {', '.join(unknown)}, which no registered "
                        f"stream declares; registered streams: {', '.join(sorted(known))}"
                    ),
                    spec.name,
                )
            )
            continue
        spec = spec if spec.origin else replace(spec, origin=origin)
        specs[spec.name] = replace(spec, loaded_code=loaded_code(spec))  # (its version's code)
    if analysed:
        findings = _analysed()
        for f in findings:
            if f["job"] in specs and f.get("delay_seconds"):
                specs[f["job"]] = replace(specs[f["job"]], emit_delay_seconds=f["delay_seconds"])
        # (every error of a refused job is a problem of its own: listed before any is popped)
        for f in [f for f in findings if f["level"] == "error" and f["job"] in specs]:
            specs.pop(f["job"], None)
            problems.append(
                LoadProblem(
                    f["where"], (f"{f['where']}: error: job {f['job']}: {f['message']}"), f["job"]
                )
            )
    return Catalogue(known, dict(sorted(specs.items())), tuple(problems))


# -- the cached analysis (`streaming_jobs.runtime.analysis.checked` writes it) ---------------------------


def _fingerprint(policy: str) -> str:
    """A hash of everything the analysis depends on: the job and stream files, the policy and
    the Spark version."""
    from pyspark import __version__ as spark_version

    digest = hashlib.sha256(f"{policy}|{spark_version}".encode())
    package = Path(__file__).resolve().parents[1]
    files = [
        package / "schemas.py",
        package / "runtime" / "analysis.py",
        package / "storage" / "sql_jobs.py",
        *sorted(PACKAGE_DIR.glob("*.py")),
        *sorted(PACKAGE_DIR.glob("*.sql")),
    ]
    files += [
        f
        for folder in job_folders()
        for f in sorted(folder.iterdir())
        if f.suffix in (".py", ".sql")
    ]
    for f in files:
        digest.update(str(f).encode() + b"\0" + f.read_bytes())
    return digest.hexdigest()[:24]


def analysis_cache(cfg) -> Path:
    """Where the analysis of the current job files is cached (one file per content)."""
    return cfg.spark.jars_cache.parent / "checks" / f"{_fingerprint(cfg.unbounded_state)}.json"


def _analysed() -> list[dict]:
    """The cached analysis of the current job files (none when not analysed yet): its errors
    are the jobs `registry()` leaves out, its delays the jobs' emit delays."""
    from streaming_jobs.core.config import TidemarkConfig

    try:
        cache = analysis_cache(TidemarkConfig.from_env())
        if not cache.exists():
            return []
        return json.loads(cache.read_text())
    except (OSError, ValueError):  # an unreadable folder or cache: analysed again at load
        return []


def streams() -> dict[str, StreamSchema]:
    """The built-in streams and those declared in the job folders (those that load)."""
    return catalogue(analysed=False).streams


def registry() -> dict[str, JobSpec]:
    """Every job that loads and that `tidemark check` did not refuse; see `load_problems`."""
    return catalogue().jobs


def load_problems() -> tuple[LoadProblem, ...]:
    """The files left out of `registry()` and `streams()`, each with its reason."""
    return catalogue().problems


def get_job(name: str) -> JobSpec:
    found = catalogue()
    try:
        return found.jobs[name]
    except KeyError:
        broken = [p for p in found.problems if p.subject == name]
        if broken:
            raise KeyError(f"job {name!r} is left out: {broken[0]}") from None
        raise KeyError(f"unknown job {name!r}; known jobs: {', '.join(found.jobs)}") from None


def stream_schema(name: str) -> StreamSchema:
    """A registered stream: built in (`streaming_jobs.schemas`) or declared in a job folder."""
    known = streams()
    try:
        return known[name]
    except KeyError:
        raise KeyError(
            f"unknown stream {name!r}; registered streams: {', '.join(sorted(known))}. "
            "Declare it in streaming_jobs/schemas.py, or as STREAM in a module of a job folder."
        ) from None
