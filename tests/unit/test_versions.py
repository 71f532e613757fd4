"""A job's version: what changes it and what does not, and the unsafe changes that only the
recorded parts show (no plan needed)."""

from __future__ import annotations

from dataclasses import replace

from streaming_jobs.core.versions import code_parts, job_version, version_parts
from streaming_jobs.runtime.changes import compare
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
