"""Live rediscovery in a real node over the mock plugin: devices added to and removed from its
TOML while the node runs, a plugin that hangs, split modes keeping new devices unassigned."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import pytest

from accelkit.config import load_host_config
from accelkit.errors import InsufficientResource
from accelkit.metrics import MetricContext
from accelkit.node import Node
from accelkit.node.health_cordons import CordonFile
from accelkit.node.rediscovery import VANISHED, HeldDevice
from accelkit.types import (
    AgentId,
    ComputeDevice,
    DeviceId,
    DeviceName,
    SlotName,
    Workload,
    WorkloadType,
)

from ..mock_device_edits import write_gpus

CUDA = DeviceName("cuda")
AGENT = AgentId("agent-1")


def gpus(n: int) -> dict[SlotName, Decimal]:
    return {SlotName("cuda.device"): Decimal(n)}


@pytest.fixture
def config_path(mock_node: Callable[..., Path]) -> Path:
    return mock_node(cpus=1, gpus=2)


def devices_of(path: Path) -> Path:
    return path.parent / "devices.toml"


async def book(node: Node, name: str, n: int = 1, agent: AgentId = AGENT) -> list[str]:
    record = await node.book(agent, Workload(name, WorkloadType.PROCESS_TREE), gpus(n))
    return sorted(record.allocation[CUDA][SlotName("cuda.device")])


def test_a_device_added_to_the_file_joins_the_shared_map(config_path: Path) -> None:
    config = load_host_config(config_path)

    async def main() -> None:
        async with Node.open(config) as node:
            assert await book(node, "a", 2) == ["cuda0", "cuda1"]
            changes = node.health.changes()
            old_context = node.agents[AGENT].contexts[CUDA]
            write_gpus(devices_of(config_path), ["cuda0", "cuda1", "cuda2"])
            report = await node.rediscover()
            assert report.plugins[CUDA].added == ("cuda2",)
            assert report.plugins[CUDA].unchanged == ("cuda0", "cuda1")
            assert report.plugins[CUDA].unassigned == ()
            assert report.messages() == ["device cuda/cuda2 added"]
            change = changes.get_nowait()
            assert change is not None
            assert (change.kind, change.device_id, change.old) == ("added", "cuda2", None)
            new_context = node.agents[AGENT].contexts[CUDA]
            assert new_context is not old_context  # a new context, the old mask untouched
            assert old_context.device_mask == {"cuda0", "cuda1"}
            assert new_context.device_mask == {"cuda0", "cuda1", "cuda2"}
            assert await book(node, "b") == ["cuda2"]  # the held allocations moved along
            with pytest.raises(InsufficientResource):
                await book(node, "c")
            again = await node.rediscover()
            assert not again.changed
            assert again.plugins[CUDA].unchanged == ("cuda0", "cuda1", "cuda2")

    asyncio.run(main())


def test_a_vanished_device_is_cordoned_and_its_holder_keeps_it(config_path: Path) -> None:
    config = load_host_config(config_path)

    async def main() -> None:
        async with Node.open(config) as node:
            record = await node.book(AGENT, Workload("holder", WorkloadType.PROCESS_TREE), gpus(1))
            lifecycle = node.lifecycle(record)
            config_seen = await lifecycle.prepare()
            assert config_seen.env_vars["MOCK_CUDA_DEVICES"] == "cuda0"
            write_gpus(devices_of(config_path), ["cuda1"])
            report = await node.rediscover()
            assert report.plugins[CUDA].removed == ("cuda0",)
            assert report.held == (HeldDevice(CUDA, DeviceId("cuda0"), AGENT, "holder"),)
            assert "still holds it" in report.messages()[-1]
            health = node.health.of(CUDA, "cuda0")
            assert not health.allocatable
            assert VANISHED in health.reason
            assert await book(node, "other") == ["cuda1"]
            with pytest.raises(InsufficientResource, match="cuda0"):
                await book(node, "third")
            # the cordon is in the state dir: every process honours it
            cordons = CordonFile(config.resource.state_dir).read()
            assert cordons[(CUDA, DeviceId("cuda0"))].reason == VANISHED
            # the holder's allocation is still booked; its teardown runs and frees it
            await lifecycle.terminate()
            assert lifecycle.released
            # back in the file: the cordon is lifted, the device granted again
            write_gpus(devices_of(config_path), ["cuda0", "cuda1"])
            back = await node.rediscover()
            assert back.plugins[CUDA].added == ("cuda0",)
            assert node.health.of(CUDA, "cuda0").allocatable
            assert await book(node, "fourth") == ["cuda0"]
            assert (CUDA, DeviceId("cuda0")) not in CordonFile(config.resource.state_dir).read()

    asyncio.run(main())


def test_a_vanished_cordon_left_by_an_earlier_process_is_lifted(config_path: Path) -> None:
    config = load_host_config(config_path)
    CordonFile(config.resource.state_dir).cordon(CUDA, DeviceId("cuda1"), VANISHED)
    CordonFile(config.resource.state_dir).cordon(CUDA, DeviceId("cuda0"), "operator")

    async def main() -> None:
        async with Node.open(config) as node:
            assert not node.health.of(CUDA, "cuda1").allocatable
            report = await node.rediscover()
            assert not report.changed
            assert node.health.of(CUDA, "cuda1").allocatable
            assert not node.health.of(CUDA, "cuda0").allocatable  # an operator's cordon stays

    asyncio.run(main())


def test_a_plugin_hanging_in_list_devices_keeps_its_devices(
    config_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = config_path.read_text().replace("[plugins]\n", '[plugins]\ncall-timeout = "0.2"\n')
    config_path.write_text(text)
    config = load_host_config(config_path)

    async def hang() -> list[ComputeDevice]:
        await asyncio.sleep(3600)
        return []

    async def main() -> None:
        async with Node.open(config) as node:
            monkeypatch.setattr(node.host.plugins[CUDA], "list_devices", hang)
            write_gpus(devices_of(config_path), ["cuda0"])
            report = await node.rediscover()
            assert "timed out after 0.2 s in list_devices" in report.plugins[CUDA].error
            assert report.plugins[DeviceName("cpu")].unchanged == ("0",)
            assert "plugin 'cuda' rediscovery failed" in report.messages()[0]
            assert any("rediscovery failed" in w for w in node.warnings)
            await node.rediscover()  # it fails again: the node's warnings do not grow
            assert sum("rediscovery failed" in w for w in node.warnings) == 1
            assert await book(node, "a", 2) == ["cuda0", "cuda1"]  # nothing changed

    asyncio.run(main())


def test_a_broken_device_file_keeps_the_last_devices(config_path: Path) -> None:
    config = load_host_config(config_path)

    async def main() -> None:
        async with Node.open(config) as node:
            devices_of(config_path).write_text("[[kinds]\nbroken")
            report = await node.rediscover()
            assert not report.changed
            assert report.plugins[CUDA].unchanged == ("cuda0", "cuda1")

    asyncio.run(main())


def test_split_modes_keep_new_devices_unassigned(config_path: Path) -> None:
    text = config_path.read_text().replace(
        "[resource]\n", '[resource]\nallocation-mode = "auto-split"\n'
    )
    config_path.write_text(
        text + '[[agents]]\n[agents.agent]\nid = "a"\n[[agents]]\n[agents.agent]\nid = "b"\n'
    )
    write_gpus(devices_of(config_path), ["cuda0", "cuda1"])
    config = load_host_config(config_path)

    async def main() -> None:
        async with Node.open(config) as node:
            write_gpus(devices_of(config_path), ["cuda0", "cuda1", "cuda2"])
            report = await node.rediscover()
            assert report.plugins[CUDA].unassigned == ("cuda2",)
            assert "unassigned" in report.messages()[0]
            masks = {a: v.contexts[CUDA].device_mask for a, v in node.agents.items()}
            assert masks == {"a": {"cuda0"}, "b": {"cuda1"}}
            assert node.health.of(CUDA, "cuda2").allocatable  # on the board, in no map

    asyncio.run(main())


def test_the_mock_metrics_follow_the_rediscovered_devices(config_path: Path) -> None:
    config = load_host_config(config_path)

    async def main() -> None:
        async with Node.open(config) as node:
            plugin = node.host.plugins[CUDA]
            [before, *_] = await plugin.gather_node_metrics(MetricContext())
            assert set(before.per_device) == {"cuda0", "cuda1"}
            write_gpus(devices_of(config_path), ["cuda1", "cuda2"])
            await node.rediscover()
            [after, *_] = await plugin.gather_node_metrics(MetricContext())
            assert set(after.per_device) == {"cuda1", "cuda2"}

    asyncio.run(main())


def test_a_new_device_declared_unhealthy_is_never_granted(config_path: Path) -> None:
    config = load_host_config(config_path)

    async def main() -> None:
        async with Node.open(config) as node:
            write_gpus(devices_of(config_path), ["cuda0", "cuda1", "cuda2"])
            text = devices_of(config_path).read_text()
            devices_of(config_path).write_text(
                text.replace('id = "cuda2"\n', 'id = "cuda2"\nhealth = "unhealthy"\n')
            )
            report = await node.rediscover()
            assert report.plugins[CUDA].added == ("cuda2",)
            assert not node.health.of(CUDA, "cuda2").allocatable  # known before it joined
            assert await book(node, "a", 2) == ["cuda0", "cuda1"]
            with pytest.raises(InsufficientResource, match="cuda2"):
                await book(node, "b")

    asyncio.run(main())


def test_the_new_maps_keep_excluding_cordoned_devices(config_path: Path) -> None:
    config = load_host_config(config_path)

    async def main() -> None:
        async with Node.open(config) as node:
            await node.health_keeper.cordon(CUDA, "cuda0", "fan")
            write_gpus(devices_of(config_path), ["cuda0", "cuda1", "cuda2"])
            await node.rediscover()
            assert await book(node, "a", 2) == ["cuda1", "cuda2"]
            with pytest.raises(InsufficientResource, match="cuda0"):
                await book(node, "b")

    asyncio.run(main())
