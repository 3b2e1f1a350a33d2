"""Health-aware allocation in a real node over the mock plugin: reports, cordons, holders told."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from decimal import Decimal
from pathlib import Path

import pytest

from accelkit import hookimpl
from accelkit.config import load_host_config
from accelkit.config.model import HostConfig
from accelkit.discovery import PluginLoader
from accelkit.errors import InsufficientResource, InvalidResourceArgument
from accelkit.events import WorkloadEvent, WorkloadPhase
from accelkit.health import DeviceHealth, HealthEvent, HealthState
from accelkit.node import Node
from accelkit.node.health_board import DeviceChange
from accelkit.node.health_notes import read_notes
from accelkit.types import AgentId, DeviceId, DeviceName, SlotName, Workload, WorkloadType

from ..mock_device_edits import set_health

CUDA = DeviceName("cuda")
AGENT = AgentId("agent-1")
ONE_GPU = {SlotName("cuda.device"): Decimal(1)}


@pytest.fixture
def config(mock_node: Callable[..., Path]) -> HostConfig:
    path = mock_node(cpus=1, gpus=2)
    text = path.read_text() + 'health-interval = "0.02"\n'
    path.write_text(text)
    return load_host_config(path)


def devices_file(config: HostConfig) -> Path:
    assert config.source_name is not None
    return Path(config.source_name).parent / "devices.toml"


class Observer:
    def __init__(self) -> None:
        self.events: list[WorkloadEvent] = []

    @hookimpl
    def accelkit_workload_event(self, event: WorkloadEvent) -> None:
        self.events.append(event)


def observed_node(config: HostConfig, observer: Observer) -> Node:
    loader = PluginLoader.from_entry_points(config.plugins.with_environment())
    loader.pm.register(observer, "observer")
    return Node.open(config, loader=loader)


async def book(node: Node, name: str) -> list[str]:
    record = await node.book(AGENT, Workload(name, WorkloadType.PROCESS_TREE), ONE_GPU)
    return sorted(record.allocation[CUDA][SlotName("cuda.device")])


def test_an_unhealthy_device_at_start_is_never_granted(config: HostConfig) -> None:
    set_health(devices_file(config), "cuda1", "unhealthy", "XID 79")

    async def main() -> None:
        async with Node.open(config) as node:
            assert node.health.of(CUDA, "cuda1").reason == "XID 79"
            assert await book(node, "a") == ["cuda0"]
            with pytest.raises(InsufficientResource, match=r"unhealthy or cordoned: cuda1"):
                await book(node, "b")

    asyncio.run(main())


def test_a_degraded_device_stays_allocatable(config: HostConfig) -> None:
    set_health(devices_file(config), "cuda0", "degraded", "ECC")
    set_health(devices_file(config), "cuda1", "degraded", "ECC")

    async def main() -> None:
        async with Node.open(config) as node:
            assert node.health.of(CUDA, "cuda0").state is HealthState.DEGRADED
            assert {*(await book(node, "a")), *(await book(node, "b"))} == {"cuda0", "cuda1"}

    asyncio.run(main())


def test_refresh_fences_and_recovery_unfences_without_restart(config: HostConfig) -> None:
    async def main() -> None:
        async with Node.open(config) as node:
            set_health(devices_file(config), "cuda0", "unhealthy", "fell off the bus")
            await node.health_keeper.refresh()
            assert await book(node, "a") == ["cuda1"]
            set_health(devices_file(config), "cuda0", "healthy")
            await node.health_keeper.refresh()
            assert await book(node, "b") == ["cuda0"]

    asyncio.run(main())


def test_holders_get_one_event_and_one_note_per_change(config: HostConfig) -> None:
    observer = Observer()

    async def main() -> None:
        async with observed_node(config, observer) as node:
            held = await book(node, "holder")
            set_health(devices_file(config), held[0], "unhealthy", "XID 48")
            await node.health_keeper.refresh()
            await node.health_keeper.refresh()  # nothing changed: nobody is told again
            notes = read_notes(node.bookkeeper.ledger)[(AGENT, "holder")]
            assert [n.text for n in notes] == [f"device cuda/{held[0]} turned unhealthy: XID 48"]

    asyncio.run(main())
    told = [e for e in observer.events if e.phase is WorkloadPhase.DEVICE_UNHEALTHY]
    assert len(told) == 1
    assert told[0].workload.id == "holder"
    assert list(told[0].devices) == [CUDA]
    assert "XID 48" in told[0].reason


def test_another_process_sees_the_same_change_without_telling_twice(config: HostConfig) -> None:
    observer = Observer()

    async def main() -> None:
        async with Node.open(config) as first:
            await book(first, "holder")
            set_health(devices_file(config), "cuda0", "unhealthy", "XID 79")
            set_health(devices_file(config), "cuda1", "unhealthy", "XID 79")
            await first.health_keeper.refresh()
            async with observed_node(config, observer) as second:  # its own fresh board
                assert second.health.of(CUDA, "cuda0").state is HealthState.UNHEALTHY

    asyncio.run(main())
    assert [e for e in observer.events if e.phase is WorkloadPhase.DEVICE_UNHEALTHY] == []


def test_cordons_are_honoured_by_every_node_before_it_books(config: HostConfig) -> None:
    async def main() -> None:
        async with Node.open(config) as booking, Node.open(config) as operator:
            assert await operator.health_keeper.cordon("cuda", "cuda0", "fan") is True
            # idempotent
            assert await operator.health_keeper.cordon("cuda", "cuda0", "again") is False
            assert await book(booking, "a") == ["cuda1"]  # read the cordon before booking
            with pytest.raises(InsufficientResource, match="cuda0"):
                await book(booking, "b")
            assert booking.health.of(CUDA, "cuda0").reason == "cordoned: fan"
            assert await operator.health_keeper.uncordon("cuda", "cuda0") is True
            assert await operator.health_keeper.uncordon("cuda", "cuda0") is False
            assert await book(booking, "b") == ["cuda0"]

    asyncio.run(main())


def test_cordon_of_an_unknown_plugin_or_device_is_refused(config: HostConfig) -> None:
    async def main() -> None:
        async with Node.open(config) as node:
            with pytest.raises(InvalidResourceArgument, match="no device 'cuda9'"):
                await node.health_keeper.cordon("cuda", "cuda9")
            with pytest.raises(InvalidResourceArgument, match="no plugin 'rocm'"):
                await node.health_keeper.uncordon("rocm", "x")

    asyncio.run(main())


def test_watching_health_follows_the_device_file(config: HostConfig) -> None:
    async def main() -> tuple[list[DeviceChange], float]:
        async with Node.open(config) as node, node.health_keeper.watching():
            changes = node.health.changes()
            started = time.monotonic()
            set_health(devices_file(config), "cuda1", "unhealthy", "XID 79")
            change = await asyncio.wait_for(anext(changes), 10)
            took = time.monotonic() - started
            assert await book(node, "a") == ["cuda0"]
            set_health(devices_file(config), "cuda1", "healthy")
            back = await asyncio.wait_for(anext(changes), 10)
            assert await book(node, "b") == ["cuda1"]
            return [change, back], took

    (lost, back), took = asyncio.run(main())
    assert lost.turned_unallocatable
    assert back.new is not None
    assert back.new.state is HealthState.HEALTHY
    assert took < 5  # polled every 0.02 s


def test_a_plugin_whose_health_fails_keeps_the_last_health_and_warns(
    config: HostConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> list[str]:
        async with Node.open(config) as node:
            plugin = node.host.plugins[CUDA]

            async def broken() -> dict[str, object]:
                msg = "driver gone"
                raise RuntimeError(msg)

            monkeypatch.setattr(plugin, "device_health", broken)
            await node.health_keeper.refresh()
            assert node.health.of(CUDA, "cuda0").state is HealthState.HEALTHY
            return node.warnings

    warnings = asyncio.run(main())
    assert any("device_health failed: RuntimeError: driver gone" in w for w in warnings)


def test_a_plugin_failing_every_refresh_warns_once_per_outage(
    config: HostConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> list[int]:
        async with Node.open(config) as node:
            plugin = node.host.plugins[CUDA]
            working = plugin.device_health

            async def broken() -> dict[str, object]:
                msg = "driver gone"
                raise RuntimeError(msg)

            def failures() -> int:
                return sum("device_health failed" in w for w in node.warnings)

            counts = []
            monkeypatch.setattr(plugin, "device_health", broken)
            for _ in range(5):
                await node.health_keeper.refresh()
            counts.append(failures())
            monkeypatch.setattr(plugin, "device_health", working)
            await node.health_keeper.refresh()
            counts.append(failures())
            monkeypatch.setattr(plugin, "device_health", broken)
            await node.health_keeper.refresh()
            await node.health_keeper.refresh()
            counts.append(failures())
            return counts

    assert asyncio.run(main()) == [1, 1, 2]


@pytest.mark.parametrize("report", [["cuda0"], {"cuda0": "broken"}])
def test_a_report_that_is_not_device_health_is_a_warning(
    config: HostConfig, monkeypatch: pytest.MonkeyPatch, report: object
) -> None:
    async def main() -> list[str]:
        async with Node.open(config) as node:
            plugin = node.host.plugins[CUDA]

            async def wrong() -> object:
                return report

            monkeypatch.setattr(plugin, "device_health", wrong)
            await node.health_keeper.refresh()
            assert node.health.of(CUDA, "cuda0").state is HealthState.HEALTHY
            return node.warnings

    warnings = asyncio.run(main())
    assert any("expected a mapping of device id to DeviceHealth" in w for w in warnings)


def test_reports_and_events_of_devices_the_plugin_does_not_have_are_ignored(
    config: HostConfig, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        async with Node.open(config) as node:
            plugin = node.host.plugins[CUDA]

            async def stray() -> dict[DeviceId, DeviceHealth]:
                return {DeviceId("cuda7"): DeviceHealth(HealthState.UNHEALTHY, "?")}

            monkeypatch.setattr(plugin, "device_health", stray)
            assert await node.health_keeper.refresh() == []
            event = HealthEvent(DeviceId("cuda8"), HealthState.HEALTHY, DeviceHealth.healthy())
            assert node.health_keeper.apply_event(CUDA, event) is None
            with pytest.raises(InvalidResourceArgument):
                node.health.of(CUDA, "cuda7")

    asyncio.run(main())
    assert "unknown device 'cuda7'" in caplog.text
    assert "unknown device 'cuda8'" in caplog.text


def test_a_watch_that_fails_is_a_warning_of_the_node(
    config: HostConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> list[str]:
        async with Node.open(config) as node:
            plugin = node.host.plugins[CUDA]

            async def broken() -> AsyncIterator[HealthEvent]:
                msg = "event set lost"
                raise RuntimeError(msg)
                yield  # pragma: no cover

            monkeypatch.setattr(plugin, "watch_health", broken)
            async with node.health_keeper.watching():
                await asyncio.sleep(0.05)
            return node.warnings

    warnings = asyncio.run(main())
    assert any("watch_health failed: RuntimeError: event set lost" in w for w in warnings)


def test_a_cordon_of_a_device_that_vanished_can_still_be_lifted(config: HostConfig) -> None:
    async def main() -> None:
        async with Node.open(config) as node:
            node.health_keeper.cordon_file.cordon("cuda", "cuda5", "pulled out")
            assert await node.health_keeper.uncordon("cuda", "cuda5") is True
            assert node.health.cordons() == {}

    asyncio.run(main())


def test_a_loss_after_an_unseen_recovery_is_news_again(config: HostConfig) -> None:
    observer = Observer()
    devices = devices_file(config)

    async def main() -> list[str]:
        async with Node.open(config) as runner:  # holds the workload throughout
            held = (await book(runner, "holder"))[0]
            set_health(devices, held, "unhealthy", "XID 79")
            async with observed_node(config, observer):
                pass
            set_health(devices, held, "healthy")  # no process runs to see it
            async with observed_node(config, observer):
                pass
            set_health(devices, held, "unhealthy", "XID 79")
            async with observed_node(config, observer):
                pass
            notes = read_notes(runner.bookkeeper.ledger)[(AGENT, "holder")]
            return [n.state for n in notes]

    assert asyncio.run(main()) == ["unhealthy", "healthy", "unhealthy"]
    told = [e for e in observer.events if e.phase is WorkloadPhase.DEVICE_UNHEALTHY]
    assert len(told) == 2


def test_a_change_published_on_the_board_fences_the_maps_too(config: HostConfig) -> None:
    async def main() -> None:
        async with Node.open(config) as node:
            old = node.health.of(CUDA, "cuda0")
            lost = DeviceHealth(HealthState.UNHEALTHY, "reported by another source")
            node.health.publish(DeviceChange(CUDA, DeviceId("cuda0"), old, lost, "health"))
            assert await book(node, "a") == ["cuda1"]
            node.health.publish(DeviceChange(CUDA, DeviceId("cuda0"), lost, old, "health"))
            assert await book(node, "b") == ["cuda0"]

    asyncio.run(main())
