"""A job's version: what changes it and what does not, and the unsafe changes that only the
recorded parts show (no plan needed)."""

from __future__ import annotations

import ast
import hashlib
import os
import subprocess
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from helpers import BY_TEXT, by_text, windowed_counts_job
from streaming_jobs.core.versions import (
    PARSING,
    RETEXTED,
    code_parts,
    holds_current,
    job_source,
    job_version,
    read_record,
    sql_digest,
    syntax_digest,
    version_parts,
    write_record,
)
from streaming_jobs.core.config import TidemarkConfig
from streaming_jobs.operations.rebuild import code_against_checkpoint
from streaming_jobs.runtime.changes import changed_since_checkpoint, compare
from streaming_jobs.storage.registry import get_job, streams

SHAPE = {"operators": [], "watermarks": [], "columns": [], "python": []}


def record(spec, version: str) -> dict:
    return {"version": version, "parts": version_parts(spec, streams()), "shape": SHAPE}


def test_results_change_the_version_and_words_do_not():
    spec, known = get_job("user_activity_profile"), streams()
    same = job_version(spec, known)
    for words in (
        replace(spec, description="another description"),
        replace(spec, tolerance=0.5),
        replace(spec, recon_warn_share=0.9),
    ):
        assert job_version(words, known) == same
    for result in (
        replace(spec, state=replace(spec.state, ttl="48 hours")),
        replace(spec, keys=(*spec.keys, "extra")),
        replace(spec, params={**spec.params, "extra": 1}),
        replace(spec, output_mode="append" if spec.output_mode == "update" else "update"),
    ):
        assert job_version(result, known) != same


def test_threads_hashing_code_take_turns_at_parsing_it():
    """Python 3.11 fails one of two threads parsing at once, now and then (see PARSING): a
    thread hashing a job's code waits while another holds the parser, then gives the same
    digests."""
    spec = replace(get_job("user_activity_profile"), loaded_code=None)  # (hashed here, not kept)
    alone = code_parts(spec)
    assert alone  # a Python job: its functions, classes and stateful modules
    done: dict[str, dict] = {}
    with PARSING:
        other = threading.Thread(target=lambda: done.update(parts=code_parts(spec)))
        other.start()
        other.join(timeout=1.0)
        assert other.is_alive() and not done, "code_parts parsed while another thread held it"
    other.join(timeout=30.0)
    assert done["parts"] == alone


def test_a_python_jobs_code_is_its_functions_classes_and_the_stateful_modules_it_uses():
    parts = code_parts(get_job("user_activity_profile"))
    assert {"build", "ProfileProcessor", "latest_profile"} <= set(parts)
    assert "streaming_jobs.stateful.epochs" in parts
    # sliding windows use panes through sliding: the modules it uses are followed
    assert {"streaming_jobs.stateful.sliding", "streaming_jobs.stateful.panes"} <= set(
        code_parts(get_job("failed_txn_velocity"))
    )


def test_a_changed_ttl_or_gold_key_is_unsafe_and_a_changed_measure_list_is_not():
    spec = get_job("user_activity_profile")
    old = record(spec, "a")
    ttl = record(replace(spec, state=replace(spec.state, ttl="48 hours")), "b")
    assert [c.what for c in compare(old, ttl) if c.unsafe] == ["ttl"]
    assert spec.output_mode == "update"  # its gold is MERGEd on its keys
    key = record(replace(spec, keys=(*spec.keys, "session_id")), "c")
    assert [c.what for c in compare(old, key) if c.unsafe] == ["gold_key"]
    measures = record(replace(spec, measures=spec.measures[:1]), "d")
    changes = compare(old, measures)
    assert changes and not [c for c in changes if c.unsafe]


def test_a_keyed_state_processors_code_is_unsafe_and_a_build_change_alone_is_not():
    """A Python job's processor class (what reads and writes its state) changed: unsafe. Its
    build changed with the same state shape: safe (the plan decides)."""
    spec = get_job("user_activity_profile")
    python = {**SHAPE, "python": ["TransformWithStateInPySpark ..."]}
    old = {**record(spec, "a"), "shape": python}
    processor = {
        **old,
        "version": "b",
        "parts": {**old["parts"], "code": dict(old["parts"]["code"])},
    }
    processor["parts"]["code"]["ProfileProcessor"] = "changed"
    assert [c.what for c in compare(old, processor) if c.unsafe] == ["code"]
    build = {**old, "version": "c", "parts": {**old["parts"], "code": dict(old["parts"]["code"])}}
    build["parts"]["code"]["build"] = "changed"
    changes = compare(old, build)
    assert [c.what for c in changes] == ["safe: code"]


CODE = '''import numpy as np


class Counter:
    """Counts."""

    def add(self, values):
        return np.asarray(values).sum() + 1
'''


def test_comments_docstrings_layout_and_where_an_import_sits_change_no_digest():
    same = syntax_digest(CODE)
    for words in (
        CODE.replace('"""Counts."""', '"""Counts what it is given."""'),
        CODE.replace("        return", "        # one more than the sum\n        return"),
        CODE.replace(
            "np.asarray(values).sum() + 1",
            "(\n            np.asarray(values).sum()\n            + 1\n        )",
        ),
        # numpy imported where used, its name kept for the annotations of type checkers only
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    import numpy as np\n"
        + CODE.replace("import numpy as np\n", "").replace(
            "    def add(self, values):\n",
            "    def add(self, values):\n        import numpy as np\n\n",
        ),
    ):
        assert syntax_digest(words) == same, words
    for result in (
        CODE.replace("+ 1", "+ 2"),
        CODE.replace("import numpy as np", "import numpy.ma as np"),  # another module
        CODE.replace(".sum()", ".max()"),
    ):
        assert syntax_digest(result) != same, result
    # a function's or class's own digest leaves imports out, as its module's imports are
    assert syntax_digest(CODE, imports=False) == syntax_digest(
        CODE.replace("import numpy as np", "import numpy.ma as np"), imports=False
    )


@pytest.mark.parametrize("job", sorted(BY_TEXT))
def test_a_record_from_before_syntax_digests_is_the_current_version(job):
    """pandas now imported where used changed these modules' text and not their syntax: a
    checkpoint recorded by text runs on, and a piece whose code did change is still found."""
    spec, old = get_job(job), by_text(job, SHAPE)
    assert old["version"] != job_version(spec, streams())
    assert holds_current(old, spec, streams())
    new = {
        "version": job_version(spec, streams()),
        "parts": version_parts(spec, streams()),
        "shape": {**SHAPE, "python": ["TransformWithStateInPySpark ..."]},
        "texts": code_parts(spec, texts=True),
    }
    assert compare({**old, "shape": new["shape"]}, new) == []
    changed = {**old, "parts": {**old["parts"], "code": dict(old["parts"]["code"])}}
    changed["parts"]["code"]["streaming_jobs.stateful.frames"] = "0123456789ab"
    assert not holds_current(changed, spec, streams())
    assert [c.what for c in compare({**changed, "shape": new["shape"]}, new)] == ["code"]


def test_each_retexted_digest_stands_for_that_code_in_git():
    """`RETEXTED`'s entries, from the files as commit 478b91e holds them."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        pytest.skip("not a git clone: the files of 478b91e cannot be read")

    def old(path: str) -> str:
        return subprocess.run(
            ["git", "show", f"478b91e:{path}"], cwd=root, capture_output=True, text=True, check=True
        ).stdout

    found = {}
    for path in ("streaming_jobs/stateful/frames.py", "streaming_jobs/stateful/sliding.py"):
        text = old(path)
        found[hashlib.sha256(text.encode()).hexdigest()[:12]] = syntax_digest(text)
    text = old("streaming_jobs/jobs/user_activity_profile.py")
    [node] = [n for n in ast.parse(text).body if getattr(n, "name", "") == "latest_profile"]
    piece = "".join(text.splitlines(keepends=True)[node.lineno - 1 : node.end_lineno])
    found[hashlib.sha256(piece.encode()).hexdigest()[:12]] = syntax_digest(piece, imports=False)
    assert found == RETEXTED


def test_a_shadow_built_by_the_same_code_under_its_text_digest_is_kept(tmp_path):
    """A rebuild's shadow begun by an earlier tidemark (its record and shadow.json hold text
    digests) is the current version's: kept and swapped, not built again. Another piece of
    code, or no record, is not."""
    from streaming_jobs.core.config import TidemarkConfig
    from streaming_jobs.operations.shadow import built_by, shadow_place

    cfg = TidemarkConfig.from_env().with_data_root(tmp_path)
    spec = get_job("user_activity_profile")
    now = job_version(spec, streams())
    old = by_text(spec.name, SHAPE)
    info = {"job": spec.name, "version": old["version"]}
    assert not built_by(cfg, spec, info, now)  # no record in the shadow's checkpoint
    checkpoint = shadow_place(cfg, spec.name).checkpoint
    write_record(checkpoint, old)
    assert built_by(cfg, spec, info, now)
    assert built_by(cfg, spec, {"version": now}, now)
    changed = {**old, "parts": {**old["parts"], "code": {**old["parts"]["code"], "build": "x"}}}
    write_record(checkpoint, changed)
    assert not built_by(cfg, spec, info, now)


QUERY = """select merchant, window.start as window_start, window.end as window_end,
       count(*) as n
from events
where status = 'FAILED  -- not a comment'
group by merchant, window(event_time, '10 minutes')
"""


def test_a_sql_jobs_comments_and_layout_change_no_digest():
    same = sql_digest(QUERY)
    for words in (
        "-- failed transactions per merchant\n" + QUERY,
        QUERY.replace("from events", "from events  /* the source /* nested */ */"),
        QUERY.replace("\n       ", " ").replace("count(*) as n", "count(*) as n  -- the count"),
    ):
        assert sql_digest(words) == same, words
    for result in (
        QUERY.replace("'FAILED  -- not a comment'", "'FAILED -- not a comment'"),
        QUERY.replace("select merchant", "select /*+ REPARTITION(4) */ merchant"),
        QUERY.replace("count(*)", "count(distinct event_id)"),
    ):
        assert sql_digest(result) != same, result


def test_a_sql_job_recorded_by_its_text_is_the_current_version(tmp_path):
    """A SQL job's record from before (its query's text digest) holds the current version; a
    changed query does not."""
    from streaming_jobs.storage.sql_jobs import load_sql_job

    path = tmp_path / "merchant_counts.sql"
    path.write_text(
        "-- source: transactions\n-- keys: merchant, window_start, window_end\n"
        "-- measures: n\n-- watermark: 5 minutes\n" + QUERY
    )
    spec = load_sql_job(path, streams())
    parts = version_parts(spec, streams())
    text = hashlib.sha256(QUERY.strip().encode()).hexdigest()[:12]  # how 478b91e hashed it
    assert parts["code"] == {"query": sql_digest(QUERY)} != {"query": text}
    old = {"version": "0123456789ab", "parts": {**parts, "code": {"query": text}}, "shape": SHAPE}
    assert holds_current(old, spec, streams())
    other = {**old, "parts": {**parts, "code": {"query": "fedcba987654"}}}
    assert not holds_current(other, spec, streams())


def test_a_user_folders_python_job_is_its_pieces_and_keeps_the_code_it_was_loaded_with(
    tmp_path, monkeypatch
):
    """A module of a user's job folder (loaded without a place in sys.modules) counts each
    function and class and the stateful modules it uses, as a built-in job does: a change of
    its processor class is unsafe. A spec loaded before its file changed keeps the version and
    the file text of the code it holds (what a run that still runs that code records and puts
    back). A record of such a job taken when its build alone was hashed holds it if that build
    is unchanged."""
    import streaming_jobs.jobs.user_activity_profile as builtin

    folder = tmp_path / "jobs"
    folder.mkdir()
    text = Path(builtin.__file__).read_text()
    assert text.count('name="user_activity_profile"') == 1
    path = folder / "idle_profile.py"
    path.write_text(text.replace('name="user_activity_profile"', 'name="idle_profile"'))
    monkeypatch.setenv("TIDEMARK_JOBS_PATH", str(folder))

    loaded = get_job("idle_profile")
    parts = code_parts(loaded)
    # the same functions, classes and stateful modules as the built-in job whose text it copies
    fresh_builtin = replace(get_job("user_activity_profile"), loaded_code=None)
    assert parts == code_parts(fresh_builtin)
    assert {"build", "ProfileProcessor", "latest_profile", "streaming_jobs.stateful.epochs"} <= set(
        parts
    )
    version, source = job_version(loaded, streams()), job_source(loaded)
    assert source == {"file": str(path), "text": path.read_text()}

    edit = "epochs.forget(watermark_ms, self.ttl_ms)"
    assert text.count(edit) == 1  # in ProfileProcessor, which keeps the state
    path.write_text(path.read_text().replace(edit, "epochs.forget(watermark_ms, 2 * self.ttl_ms)"))
    stamp = path.stat().st_mtime + 10  # (another load of the module, whatever the clock's grain)
    os.utime(path, (stamp, stamp))
    edited = get_job("idle_profile")
    assert job_version(edited, streams()) != version
    assert job_source(edited)["text"] == path.read_text()
    python = {**SHAPE, "python": ["TransformWithStateInPySpark ..."]}
    was = {**record(loaded, "a"), "shape": python}
    now = {**record(edited, "b"), "shape": python, "texts": code_parts(edited, texts=True)}
    assert [(c.what, c.detail) for c in compare(was, now) if c.unsafe] == [
        ("code", "ProfileProcessor changed")
    ]
    # the spec loaded first is still the code it was loaded with
    assert job_version(loaded, streams()) == version
    assert job_source(loaded) == source

    # a checkpoint with a committed batch, recorded when the build alone was hashed: the same
    # job (`tidemark check` and a run's start say no change), unless that build changed
    cfg = TidemarkConfig.from_env().with_data_root(tmp_path / "root")
    checkpoint = cfg.paths.checkpoint("idle_profile")
    (checkpoint / "commits").mkdir(parents=True)
    (checkpoint / "commits" / "0").write_text("v1\n{}")
    build_only = {**was["parts"], "code": {"build": parts["build"]}}
    write_record(checkpoint, {"version": "0123456789ab", "parts": build_only, "shape": python})
    assert holds_current(read_record(checkpoint), loaded, streams())
    assert not changed_since_checkpoint(cfg, loaded)
    # and `tidemark code` says the code is the checkpoint's (nothing to put back)
    assert code_against_checkpoint(cfg, loaded).differs == ()
    other = {**build_only, "code": {"build": "0123456789ab"}}
    write_record(checkpoint, {"version": "0123456789ab", "parts": other, "shape": python})
    assert not holds_current(read_record(checkpoint), loaded, streams())
    assert changed_since_checkpoint(cfg, loaded)
    assert "code: build" in code_against_checkpoint(cfg, loaded).differs


def test_a_file_saved_again_while_it_loads_keeps_the_text_and_version_of_the_code_that_runs(
    tmp_path, monkeypatch
):
    """An editor's save that lands after the registry ran a job's file and before it took the
    job's version: the version and the kept text are those of the code loaded (the file read
    once), for a Python module and a SQL file of a user's folder."""
    import streaming_jobs.jobs.user_activity_profile as builtin
    import streaming_jobs.storage.registry as registry

    folder = tmp_path / "jobs"
    folder.mkdir()
    monkeypatch.setenv("TIDEMARK_JOBS_PATH", str(folder))
    profile = Path(builtin.__file__).read_text()
    profile = profile.replace('name="user_activity_profile"', 'name="idle_profile"')
    edit = "epochs.forget(watermark_ms, self.ttl_ms)"
    assert profile.count(edit) == 1
    first = {
        "idle_profile.py": profile,
        "merchant_counts.sql": windowed_counts_job("merchant_counts", 10),
    }
    saved = {
        "idle_profile.py": profile.replace(edit, "epochs.forget(watermark_ms, 2 * self.ttl_ms)"),
        "merchant_counts.sql": windowed_counts_job("merchant_counts", 15),
    }
    for name, text in first.items():
        (folder / name).write_text(text)

    def load(stamp: int) -> dict:
        for path in folder.iterdir():  # (another load of each file, whatever the clock's grain)
            os.utime(path, (stamp, stamp))
        jobs = registry.catalogue().jobs  # (one load: another would read the saved files)
        return {job: jobs[job] for job in ("idle_profile", "merchant_counts")}

    clean = load(1_000)
    versions = {job: job_version(spec, streams()) for job, spec in clean.items()}

    taken = registry.loaded_code

    def saved_again_first(spec):
        path = Path(spec.origin or "")
        if path.parent == folder:
            path.write_text(saved[path.name])
        return taken(spec)

    monkeypatch.setattr(registry, "loaded_code", saved_again_first)
    raced = load(2_000)
    assert (folder / "idle_profile.py").read_text() == saved["idle_profile.py"]
    for job, file in (
        ("idle_profile", "idle_profile.py"),
        ("merchant_counts", "merchant_counts.sql"),
    ):
        assert job_source(raced[job]) == {"file": str(folder / file), "text": first[file]}
        assert job_version(raced[job], streams()) == versions[job]
