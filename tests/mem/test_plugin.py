"""The mem plugin: device, slots, allocation, lifecycle hook, registration, conformance."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from pathlib import Path

import pytest

from accelkit.allocmap import AllocationStrategy
from accelkit.errors import InvalidResourceArgument
from accelkit.partition import SlotPartition
from accelkit.testing import PluginConformance
from accelkit.testing.fakehost import FakeHost
from accelkit.types import (
    AgentId,
    DeviceId,
    DeviceSlotInfo,
    SlotName,
    SlotType,
    Workload,
    WorkloadConfig,
)
from accelkit_mem.hook import MemLifecycleHook
from accelkit_mem.plugin import MemAgentContext, MemPlugin

GiB = 2**30
MEM = SlotName("mem")
ROOT = DeviceId("root")


@pytest.fixture
def limited_host(tmp_path: Path) -> Path:
    """16 GiB of RAM, this process's v2 cgroup limited to 6 GiB."""
    host = FakeHost(tmp_path)
    host.mount_v2()
    host.member("0::/agent")
    host.write("sys/fs/cgroup/agent/memory.max", f"{6 * GiB}\n")
    host.write("sys/fs/cgroup/agent/memory.current", f"{GiB}\n")
    host.write("sys/fs/cgroup/agent/memory.stat", f"inactive_file {GiB // 4}\n")
    return tmp_path


def started(plugin: MemPlugin) -> MemPlugin:
    asyncio.run(plugin.init())
    asyncio.run(plugin.discover())
    return plugin


def test_one_root_device_of_the_usable_memory(limited_host: Path) -> None:
    plugin = started(MemPlugin({}, root=limited_host, ram=lambda: 16 * GiB))
    [device] = plugin.devices
    assert (device.device_name, device.device_id, device.memory_size) == ("mem", "root", 6 * GiB)
    assert device.extra["ram"] == str(16 * GiB)
    assert device.extra["source"].endswith("agent/memory.max")
    facts = asyncio.run(plugin.get_node_info()).facts
    assert (facts["usable"], facts["ram"]) == (str(6 * GiB), str(16 * GiB))
    assert plugin.shared_by_amount is True
    assert plugin.allocation_strategy() is AllocationStrategy.FILL


def test_slots_reflect_the_overcommit_factor(limited_host: Path) -> None:
    plugin = started(MemPlugin({"overcommit-factor": "1.5"}, root=limited_host, ram=lambda: 1000))
    [spec] = plugin.configurable_slots()
    assert (spec.name, spec.type) == ("mem", SlotType.BYTES)
    assert plugin.device_slots(plugin.devices) == {
        ROOT: DeviceSlotInfo(SlotType.BYTES, MEM, Decimal(1500))
    }
    odd = started(MemPlugin({"overcommit-factor": "1.5"}, root=limited_host, ram=lambda: 1001))
    assert odd.device_slots(odd.devices)[ROOT].amount == 1501  # rounded down to whole bytes


def agent(plugin: MemPlugin, share: int) -> MemAgentContext:
    context = plugin.create_agent_context(AgentId("a1"), SlotPartition({MEM: share}, (ROOT,)))
    assert isinstance(context, MemAgentContext)
    return context


def test_an_agent_allocates_up_to_its_share(limited_host: Path) -> None:
    plugin = started(MemPlugin({}, root=limited_host, ram=lambda: 16 * GiB))
    context = agent(plugin, 4 * GiB)
    assert context.available_slots() == {MEM: 4 * GiB}
    alloc = context.alloc_map.allocate({MEM: Decimal(3 * GiB)})
    assert alloc == {MEM: {ROOT: Decimal(3 * GiB)}}
    config = asyncio.run(context.create_lifecycle_hook(Workload("pid:1"), alloc).pre_create())
    assert config == WorkloadConfig(memory_limit=3 * GiB)
    assert str(alloc[MEM][ROOT]) == str(3 * GiB)  # plain integer form


def test_hook_without_memory_sets_no_limit() -> None:
    hook = MemLifecycleHook(Workload("pid:1"), {MEM: {ROOT: Decimal(0)}})
    assert asyncio.run(hook.pre_create()) == WorkloadConfig()
    assert asyncio.run(MemLifecycleHook(Workload("pid:1"), {}).pre_create()) == WorkloadConfig()


@pytest.mark.parametrize("amount", [Decimal("0.5"), Decimal(-1)])
def test_hook_refuses_amounts_that_are_not_bytes(amount: Decimal) -> None:
    hook = MemLifecycleHook(Workload("pid:1"), {MEM: {ROOT: amount}})
    with pytest.raises(InvalidResourceArgument, match="whole, non-negative number of bytes"):
        asyncio.run(hook.pre_create())


class TestConformance(PluginConformance):
    @pytest.fixture
    def plugin(self) -> MemPlugin:
        return MemPlugin({})
