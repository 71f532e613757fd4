"""The health sensor watches the data root's free space against TIDEMARK_MIN_FREE_GB."""

from __future__ import annotations

import shutil

from dagster import DagsterInstance, build_sensor_context

from streaming_jobs.storage import ops_tables


def disk_alerts(cfg) -> list[dict]:
    return [r for r in ops_tables.read(cfg, "alerts") if r["kind"] == "disk_space"]


def test_low_free_space_is_a_critical_alert_resolved_when_space_is_back(cfg, monkeypatch):
    from orchestration.defs.ops.sensors import platform_health_sensor
    from orchestration.lib.resources import TidemarkResource

    cfg.data_root.mkdir(parents=True, exist_ok=True)
    free_gb = shutil.disk_usage(cfg.data_root).free / 1024**3
    context = build_sensor_context(
        instance=DagsterInstance.ephemeral(),
        resources={"tidemark": TidemarkResource(data_root=str(cfg.data_root))},
    )

    monkeypatch.setenv("TIDEMARK_MIN_FREE_GB", str(free_gb * 10))  # more than the disk has
    platform_health_sensor(context)
    [alert] = disk_alerts(cfg)
    assert alert["severity"] == "critical" and alert["resolved_at"] is None
    assert f"GB free on the disk of {cfg.data_root}" in alert["message"]

    monkeypatch.setenv("TIDEMARK_MIN_FREE_GB", str(free_gb / 10))
    platform_health_sensor(context)
    [alert] = disk_alerts(cfg)
    assert alert["resolved_at"] is not None and alert["resolution"] == "free space is back"
