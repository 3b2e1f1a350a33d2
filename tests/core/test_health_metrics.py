"""The device health series: one state set to 1 per device, transitions counted, promtool clean."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from accelkit.config import load_host_config
from accelkit.health import DeviceHealth, HealthState
from accelkit.host import PartitionHost
from accelkit.metrics_export.exposition import Exposition
from accelkit.metrics_export.gather import MetricsGatherer
from accelkit.metrics_export.health_metrics import HealthCollector
from accelkit.node.health_board import Cordon, HealthBoard
from accelkit.types import DeviceId, DeviceName

GPU = DeviceName("cuda")


def board() -> HealthBoard:
    found = HealthBoard()
    for device in ("cuda0", "cuda1", "cuda10", "cuda2"):
        found.report(GPU, device, DeviceHealth.healthy())
    found.report(GPU, "cuda1", DeviceHealth(HealthState.UNHEALTHY, "XID 79"))
    found.report(GPU, "cuda1", DeviceHealth.healthy())
    found.report(GPU, "cuda2", DeviceHealth(HealthState.DEGRADED, "ECC"))
    found.set_cordons({(GPU, DeviceId("cuda10")): Cordon("fan", Decimal(1))})
    return found


def exposition(source: HealthBoard) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(HealthCollector(lambda: source))
    return generate_latest(registry).decode()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_each_device_has_exactly_its_current_state_set() -> None:
    found = samples(exposition(board()))
    current = {
        dict(labels)["device"]: dict(labels)["state"]
        for (name, labels), value in found.items()
        if name == "accelkit_device_health" and value == 1
    }
    assert current == {
        "cuda0": "healthy",
        "cuda1": "healthy",
        "cuda2": "degraded",
        "cuda10": "unhealthy",  # cordoned
    }
    per_device = [v for (n, _l), v in found.items() if n == "accelkit_device_health"]
    assert len(per_device) == 4 * len(HealthState)


def test_transitions_are_counted_per_device() -> None:
    found = samples(exposition(board()))
    counts = {
        dict(labels)["device"]: value
        for (name, labels), value in found.items()
        if name == "accelkit_device_health_transitions_total"
    }
    assert counts == {"cuda0": 0, "cuda1": 2, "cuda2": 1, "cuda10": 1}


def test_an_exposition_with_a_board_renders_health_fresh_on_every_scrape(
    mock_node: Callable[..., Path],
) -> None:
    config = load_host_config(mock_node(cpus=1))
    source = board()

    async def main() -> list[str]:
        async with PartitionHost.open(config) as host:
            rendering = Exposition(MetricsGatherer(host), health=lambda: source)
            first, _type = await rendering.render(None, None)
            source.report(GPU, "cuda0", DeviceHealth(HealthState.UNHEALTHY, "XID 48"))
            second, _type = await rendering.render(None, None)
            return [first.decode(), second.decode()]

    first, second = asyncio.run(main())
    assert "accelkit_cpu_node_utilization_ratio" in first
    assert 'accelkit_device_health{device="cuda0",plugin="cuda",state="healthy"} 1.0' in first
    assert 'accelkit_device_health{device="cuda0",plugin="cuda",state="unhealthy"} 1.0' in second


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_the_health_series_pass_promtool() -> None:
    result = subprocess.run(
        ["promtool", "check", "metrics"],
        input=exposition(board()),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (result.stdout + result.stderr).strip() == ""
