"""Streams and jobs as a user declares them: keys of any shape, measures of any type, and
load-time errors that name the file and the line (no Spark: these run when a file loads)."""

from __future__ import annotations

import textwrap

import pytest
import yaml

from streaming_jobs.runtime.ingestion import landing_files
from streaming_jobs.storage.registry import registry, streams
from streaming_jobs.schemas import STREAMS
from streaming_jobs.storage.sql_jobs import JobFileError, load_sql_job

from orchestration.recon import dbt_models
from orchestration.recon.dbt_vars import job_vars, text_measures
from orchestration.cli.scaffold import scaffold

READINGS = """
from pyspark.sql import types as T
from streaming_jobs.schemas import Field, StreamSchema
STREAMS = [
    StreamSchema(name="readings", key=("sensor_id", "read_at"), event_time="read_at", fields=(
        Field("sensor_id", T.StringType(), "the sensor"),
        Field("site", T.StringType(), "where it is"),
        Field("celsius", T.DoubleType(), "the reading"),
        Field("read_at", T.TimestampType(), "when"))),
    StreamSchema(name="alarms", key=None, event_time="raised_at", fields=(
        Field("site", T.StringType(), "where"),
        Field("level", T.StringType(), "how bad"),
        Field("raised_at", T.TimestampType(), "when"))),
]
"""


def sql_job(**header) -> str:
    lines = ["-- a_job: a job under test."]
    lines += [f"-- {k}: {v}" for k, v in header.items() if k != "query"]
    return (
        "\n".join(lines)
        + "\n"
        + header.get(
            "query",
            "select site, window.start as window_start, window.end as window_end, "
            "count(*) as n\nfrom events\ngroup by site, window(read_at, '5 minutes')",
        )
        + "\n"
    )


@pytest.fixture
def folder(tmp_path, monkeypatch):
    path = tmp_path / "jobs"
    path.mkdir()
    (path / "sensors.py").write_text(READINGS)
    monkeypatch.setenv("TIDEMARK_JOBS_PATH", str(path))
    return path


def test_a_stream_declares_one_key_several_or_none(folder):
    known = streams()
    assert known["readings"].key == ("sensor_id", "read_at")
    assert known["readings"].dedup_key == ("sensor_id", "read_at")
    assert known["alarms"].key is None
    assert known["alarms"].dedup_key == ("site", "level", "raised_at")  # every field
    assert STREAMS["clicks"].key == ("event_id",)


def test_every_layer_gets_the_declared_key(folder):
    (folder / "per_site.sql").write_text(
        sql_job(
            source="readings",
            joins="alarms",
            keys="site, window_start, window_end",
            measures="n",
            watermark="10 minutes",
        )
    )
    params = job_vars({"per_site": registry()["per_site"]})["per_site"]
    assert params["source_keys"] == {
        "readings": ["sensor_id", "read_at"],
        "alarms": ["site", "level", "raised_at"],
    }
    assert params["source_columns"] == {"readings": ["site", "celsius"], "alarms": []}
    # the staging yml tests each key column once, the event time too (it is also a key)
    text = dbt_models.staging_yml(streams()["readings"], "header")
    model = yaml.safe_load(text.split("\n", 1)[1])["models"][0]
    tested = [c["name"] for c in model["columns"]]
    assert tested == ["sensor_id", "read_at", "bronze_version"]
    # one test covers them all: a test per column would read bronze once per column
    [test] = model["data_tests"]
    assert test["columns_not_null"]["name"] == "stg_readings__not_null"
    assert test["columns_not_null"]["arguments"]["columns"] == tested
    none_key = dbt_models.staging_yml(streams()["alarms"], "header")
    assert "only exact duplicate lines are one event" in none_key


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"key": "nope"}, "key nope is not a list of distinct fields"),
        ({"event_time": "site"}, "must be a T.TimestampType() field"),
        ({"event_time": "missing"}, "event_time 'missing' is not one of its fields"),
        ({"name": "../escape"}, "lower case letters, digits and _"),
        ({"max_ahead": "soon"}, "max_ahead 'soon' is not an interval"),
    ],
)
def test_a_bad_stream_declaration_names_the_stream_and_the_fix(bad, message):
    from pyspark.sql import types as T

    from streaming_jobs.schemas import Field, StreamSchema

    args = {
        "name": "s",
        "event_time": "at",
        "key": "id",
        "fields": (
            Field("id", T.StringType(), ""),
            Field("site", T.StringType(), ""),
            Field("at", T.TimestampType(), ""),
        ),
        **bad,
    }
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        StreamSchema(**args)


def test_measures_are_optional_and_sessions_get_their_open_when(folder):
    path = folder / "sessions.sql"
    path.write_text(
        sql_job(
            source="readings",
            keys="sensor_id, session_start, session_end",
            watermark="10 minutes",
            query=(
                "select sensor_id, session_window.start as session_start, "
                "session_window.end as session_end\nfrom events\n"
                "group by sensor_id, session_window(read_at, '5 minutes')"
            ),
        )
    )
    spec = load_sql_job(path, streams())
    assert spec.measures == ()
    assert spec.window_end == "session_end"
    assert spec.recon_open_when == ("coalesce(t.session_end, o.session_end) > s.stream_watermark")
    plain = folder / "plain.sql"
    plain.write_text(
        sql_job(
            source="readings",
            keys="sensor_id, read_at",
            measures="celsius",
            watermark="10 minutes",
            query="select sensor_id, read_at, celsius from events",
        )
    )
    assert load_sql_job(plain, streams()).recon_open_when == "false"


@pytest.mark.parametrize(
    "header, line, message",
    [
        ({"source": "readings", "keys": "site"}, 1, "missing header watermark"),
        (
            {"source": "nowhere", "keys": "site", "watermark": "1 minute"},
            2,
            "it reads nowhere, which no registered stream declares",
        ),
        (
            {"source": "readings", "keys": "site", "watermark": "1 minute", "tolerance": "a lot"},
            5,
            "tolerance is a number",
        ),
        (
            {"source": "readings", "keys": "site, n", "measures": "n", "watermark": "1 minute"},
            4,
            "n listed twice in keys and measures",
        ),
        (
            {
                "source": "readings",
                "keys": "site, window_start",
                "measures": "n",
                "watermark": "1 minute",
            },
            3,
            "no key says when a row is final",
        ),
        (
            {
                "source": "readings",
                "keys": "site",
                "watermark": "1 minute",
                "window_end": "window_end",
            },
            5,
            "window_end 'window_end' is not one of the keys",
        ),
        (
            {
                "source": "readings",
                "keys": "site",
                "watermark": "1 minute",
                "unbounded_state": "maybe",
            },
            5,
            "unbounded_state is 'refuse' or 'warn'",
        ),
        *(
            (
                {
                    "source": "readings",
                    "keys": "site",
                    "watermark": "1 minute",
                    "tolerance": bad,
                    "query": "select site from events",
                },
                5,
                f"tolerance is a finite number of at least 0, got {got}",
            )
            for bad, got in (("nan", "nan"), ("inf", "inf"), ("-1", "-1.0"))
        ),
        (
            {
                "source": "readings",
                "keys": "site",
                "watermark": "1 minute",
                "partition_by": "site, ../../x",
                "query": "select site from events",
            },
            5,
            "partition_by '../../x' is not a column name",
        ),
    ],
)
def test_each_header_error_names_the_file_and_line(folder, header, line, message):
    path = folder / "a_job.sql"
    path.write_text(sql_job(**header))
    with pytest.raises(JobFileError) as raised:
        load_sql_job(path, streams())
    assert f"{path}:{line}:" in str(raised.value)
    assert message in str(raised.value)


def test_a_header_key_given_twice_names_both_lines(folder):
    path = folder / "twice.sql"
    path.write_text(
        "-- twice: x.\n-- source: readings\n-- keys: site\n-- source: alarms\n"
        "-- watermark: 1 minute\nselect site from events\n"
    )
    with pytest.raises(
        JobFileError,
        match=rf"{path}:4: header 'source' is given twice "
        r"\(first on line 2\)",
    ):
        load_sql_job(path, streams())


@pytest.mark.parametrize(
    "name, message",
    [
        ("../../etc", "lower case letters, digits and _"),  # escapes the data root
        ("it's", "lower case letters, digits and _"),  # a quote: SQL, Jinja, Dagster keys
        ("two words", "lower case letters, digits and _"),
        ("Upper", "lower case letters, digits and _"),
        ("bronze_readings", "names starting with bronze_ are the ingestion queries'"),
    ],
)
def test_a_job_name_that_escapes_or_collides_is_refused(folder, name, message):
    path = folder / "ok.sql"
    path.write_text(
        sql_job(
            name=name,
            source="readings",
            keys="site",
            watermark="1 minute",
            query="select site from events",
        )
    )
    with pytest.raises(JobFileError, match=message):
        load_sql_job(path, streams())


def test_text_measures_are_the_non_numeric_gold_columns(folder):
    (folder / "tops.sql").write_text(
        sql_job(
            source="readings",
            keys="site, window_start, window_end",
            measures="n, top, label",
            watermark="1 minute",
        )
    )
    jobs = {"tops": registry()["tops"]}
    types = {
        "tops": {
            "site": "string",
            "n": "long",
            "top": "array",
            "label": "string",
            "window_start": "timestamp",
            "window_end": "timestamp",
        }
    }
    assert text_measures(types, jobs) == {"tops": ["top", "label"]}
    types["tops"].update(top="decimal(10,2)", label="double")
    assert text_measures(types, jobs) == {}


def test_scaffolds_load_as_they_are(folder):
    stream = scaffold("stream", "meters", folder=str(folder))
    sql = scaffold("job", "meters_5m", folder=str(folder), source="meters")
    python = scaffold("job", "meters_5m_py", folder=str(folder), source="meters", sql=False)
    assert (stream.name, sql.name, python.name) == ("meters.py", "meters_5m.sql", "meters_5m_py.py")
    assert streams()["meters"].key == ("event_id",)
    jobs = registry()
    assert jobs["meters_5m"].recon_open_when.startswith("coalesce(t.window_end")
    assert jobs["meters_5m_py"].batch_sql and jobs["meters_5m_py"].measures == ("events",)
    with pytest.raises(FileExistsError):
        scaffold("job", "meters_5m", folder=str(folder), source="meters")
    # a stream that does not exist yet: a message with the command that starts one
    with pytest.raises(ValueError, match="unknown stream 'nope'.*'tidemark new stream nope'"):
        scaffold("job", "x", folder=str(folder), source="nope")


def test_landing_files_are_every_file_the_reader_admits(tmp_path):
    for name in ("a.jsonl", "b.json", "c", ".hidden.jsonl", "_tmp.jsonl"):
        (tmp_path / name).write_text("{}\n")
    (tmp_path / "sub").mkdir()
    assert [f.name for f in landing_files(tmp_path)] == ["a.jsonl", "b.json", "c"]
    assert landing_files(tmp_path / "none") == []


def test_job_modules_know_their_file(folder):
    (folder / "per_site.sql").write_text(
        sql_job(
            source="readings",
            keys="site, window_start, window_end",
            measures="n",
            watermark="10 minutes",
        )
    )
    spec = registry()["per_site"]
    assert spec.at("keys") == f"{folder / 'per_site.sql'}:3"
    assert spec.at() == f"{folder / 'per_site.sql'}:6"
    assert registry()["user_sessions"].origin.endswith("streaming_jobs/jobs/user_sessions.py")


def test_a_python_job_module_text_is_unchanged_by_dedent():
    # the scaffold's Python job is valid Python on its own
    from orchestration.cli.scaffold import PY_JOB

    compile(textwrap.dedent(PY_JOB.format(name="x", source="s", event_time="t")), "x.py", "exec")
