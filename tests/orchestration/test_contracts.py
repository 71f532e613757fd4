"""Contracts between parts: schemas vs dbt sources, the generator's command line, startup errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from streaming_jobs.storage.generator import main as generator_main
from streaming_jobs.storage.registry import registry
from streaming_jobs.schemas import STREAMS


def test_dbt_sees_every_stream_with_exactly_its_schema_fields(cfg):
    """dbt's own parse (the manifest Dagster loads) against the declared schemas."""
    from orchestration.recon.dbt_models import ensure_manifest

    manifest = json.loads(ensure_manifest(cfg).read_text())
    sources = {s["name"]: s for s in manifest["sources"].values()}
    models = {n["name"]: n for n in manifest["nodes"].values() if n["resource_type"] == "model"}
    for name, schema in STREAMS.items():
        table = sources[f"bronze_{name}"]
        assert list(table["columns"]) == schema.field_names
        assert table["meta"]["dagster"]["asset_key"] == ["bronze", name]
        assert f"stg_{name}" in models and models[f"stg_{name}"]["fqn"][1] == "staging"
    for job in registry():
        assert sources[f"gold_{job}"]["meta"]["dagster"]["asset_key"] == ["gold", job]


def test_generator_command_line_writes_the_files_asked_for(tmp_path, capsys):
    assert (
        generator_main(
            [
                "--data-root",
                str(tmp_path),
                "--events",
                "300",
                "--files",
                "6",
                "--only",
                "2:5",
                "--seed",
                "4",
            ]
        )
        == 0
    )
    written = sorted(p.name for p in (tmp_path / "landing" / "transactions").iterdir())
    assert written == ["part-4-00002.jsonl", "part-4-00003.jsonl", "part-4-00004.jsonl"]
    assert "wrote 3 files" in capsys.readouterr().out


def test_unresolvable_jars_give_one_clear_message(tmp_path):
    env = {
        **os.environ,
        "TIDEMARK_JARS_CACHE": str(tmp_path / "ivy"),
        "TIDEMARK_DATA_ROOT": str(tmp_path / "data"),
        "TIDEMARK_EXTRA_PACKAGES": "io.tidemark.missing:no-such-artifact_2.13:0.0.1",
    }
    tidemark = str(Path(sys.executable).with_name("tidemark"))
    result = subprocess.run(
        [tidemark, "summary"], env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 2
    message = [line for line in result.stderr.splitlines() if line.startswith("tidemark:")]
    assert len(message) == 1
    assert "no-such-artifact_2.13:0.0.1" in message[0] and "Maven Central" in message[0]
    assert "make setup" in message[0]
    # Ivy's own line for the module, not every repository that lacked a file
    assert ":: io.tidemark.missing#no-such-artifact_2.13;0.0.1: not found" in result.stderr
    assert "url=" not in result.stderr


def test_recon_command_reports_an_empty_data_root_plainly(tmp_path):
    env = {**os.environ, "TIDEMARK_DATA_ROOT": str(tmp_path / "data")}
    tidemark = str(Path(sys.executable).with_name("tidemark"))
    result = subprocess.run(
        [tidemark, "recon"], env=env, capture_output=True, text=True, timeout=600
    )
    # nothing reconciled is not a clean reconciliation: a gate on this command must not pass
    assert result.returncode == 1, result.stderr[-2000:]
    lines = result.stdout.strip().splitlines()
    assert lines[-2:] == [
        "  no reconciliation has run yet",
        "reconciliation: none has run yet (run `tidemark run`, or the "
        "reconciliation job in Dagster)",
    ]


@pytest.mark.long  # CI's budget (about 45 s): every Dagster test loads the same definitions
def test_dg_loads_and_checks_the_definitions_folder(cfg):
    """Dagster's own project tooling (dg) reads the same code location: `dg list defs`."""
    from streaming_jobs.core.config import CHECKOUT

    dg = str(Path(sys.executable).with_name("dg"))
    env = {**os.environ, "TIDEMARK_DATA_ROOT": str(cfg.data_root), "NO_COLOR": "1"}
    # `dg list defs` loads the code location through dg's project settings (it fails when the
    # definitions do not load) and lists them. `dg check defs` loads it once more through a
    # workspace and checks component YAML, of which the project has none: about 30 s of CI for
    # no other finding, so the test runs one load, not two
    listed = subprocess.run(
        [dg, "list", "defs", "--json"],
        cwd=CHECKOUT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert listed.returncode == 0, (listed.stdout + listed.stderr)[-3000:]
    defs = json.loads(listed.stdout[listed.stdout.index("{") :])
    assets = {a["asset_key"] for a in defs["assets"]}
    assert {"gold/failed_txn_velocity", "recon/recon_summary", "ops/overview"} <= assets
    assert {s["name"] for s in defs["sensors"]} >= {
        "checkpoint_health_sensor",
        "reconcile_on_update_sensor",
    }
