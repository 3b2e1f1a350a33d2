"""The cpu plugin: devices, slots, allocation, lifecycle hook, registration, conformance."""

from __future__ import annotations

import asyncio
import os
from decimal import Decimal
from pathlib import Path

import pytest

from accelkit.errors import InvalidResourceArgument
from accelkit.partition import DevicePartition
from accelkit.testing import PluginConformance
from accelkit.testing.fakehost import FakeHost
from accelkit.types import (
    AgentId,
    ComputeDevice,
    DeviceId,
    DeviceSlotInfo,
    SlotName,
    SlotType,
    Workload,
    WorkloadConfig,
)
from accelkit_cpu.hook import THREAD_COUNT_VARS, CPULifecycleHook
from accelkit_cpu.plugin import CPUAgentContext, CPUPlugin

CPU = SlotName("cpu")


@pytest.fixture
def two_node_host(tmp_path: Path) -> Path:
    """Cores 0-3 on node 0 and 4-7 on node 1; the cgroup allows 0-2 and 4-6."""
    host = FakeHost(tmp_path)
    host.mount_v1("cpuset", "/sys/fs/cgroup/cpuset")
    host.member("3:cpuset:/agent")
    host.write("sys/fs/cgroup/cpuset/agent/cpuset.effective_cpus", "0-2,4-6\n")
    host.write("sys/devices/system/node/node0/cpulist", "0-3\n")
    host.write("sys/devices/system/node/node1/cpulist", "4-7\n")
    host.write("proc/cpuinfo", "processor : 0\nmodel name : Fake CPU\n\nprocessor : 4\n")
    return tmp_path


def started(plugin: CPUPlugin) -> CPUPlugin:
    asyncio.run(plugin.init())
    asyncio.run(plugin.discover())
    return plugin


def test_one_device_per_usable_core(two_node_host: Path) -> None:
    plugin = started(CPUPlugin({}, root=two_node_host))
    assert [d.device_id for d in plugin.devices] == ["0", "1", "2", "4", "5", "6"]
    assert plugin.devices[0] == ComputeDevice(
        device_name="cpu",
        device_id=DeviceId("0"),
        hw_location="cpu0",
        numa_node=0,
        memory_size=0,
        processing_units=1,
        model_name="Fake CPU",
    )
    assert [d.numa_node for d in plugin.devices] == [0, 0, 0, 1, 1, 1]
    assert plugin.devices[1].model_name == ""  # not in cpuinfo
    info = asyncio.run(plugin.get_node_info())
    assert info.facts["cores"] == "0-2,4-6"
    assert info.facts["numa_nodes"] == "0,1"
    assert info.facts["cores_source"].endswith("agent/cpuset.effective_cpus")


def test_slots_reflect_the_overcommit_factor(two_node_host: Path) -> None:
    plugin = started(CPUPlugin({"overcommit-factor": 3}, root=two_node_host))
    [spec] = plugin.configurable_slots()
    assert (spec.name, spec.type) == ("cpu", SlotType.COUNT)
    slots = plugin.device_slots(plugin.devices)
    assert slots[DeviceId("4")] == DeviceSlotInfo(SlotType.COUNT, CPU, Decimal(3), 1)
    assert set(slots) == {d.device_id for d in plugin.devices}


def test_allocation_spreads_evenly_and_respects_the_mask(two_node_host: Path) -> None:
    plugin = started(CPUPlugin({}, root=two_node_host))
    context = plugin.create_agent_context(AgentId("a1"), DevicePartition.of("0", "1", "2"))
    assert isinstance(context, CPUAgentContext)
    alloc = context.alloc_map.allocate({CPU: Decimal(2)})
    assert sorted(alloc[CPU].values()) == [Decimal(1), Decimal(1)]  # two cores, one slot each
    with pytest.raises(InvalidResourceArgument):
        context.alloc_map.apply_allocation({CPU: {DeviceId("4"): Decimal(1)}})


def test_overcommitted_cores_take_more_than_one_slot(two_node_host: Path) -> None:
    plugin = started(CPUPlugin({"overcommit-factor": 2}, root=two_node_host))
    context = plugin.create_agent_context(AgentId("a1"), DevicePartition.of("0", "1"))
    assert context.available_slots() == {CPU: Decimal(4)}
    alloc = context.alloc_map.allocate({CPU: Decimal(4)})
    assert alloc[CPU] == {DeviceId("0"): Decimal(2), DeviceId("1"): Decimal(2)}


def test_hook_pins_cores_memory_nodes_and_thread_counts(two_node_host: Path) -> None:
    plugin = started(CPUPlugin({}, root=two_node_host))
    context = plugin.create_agent_context(AgentId("a1"), DevicePartition.of("0", "1", "2", "4"))
    alloc = {CPU: {DeviceId("4"): Decimal(1), DeviceId("1"): Decimal(1), DeviceId("2"): 0}}
    workload = Workload.process_tree("pid:1")
    config = asyncio.run(context.create_lifecycle_hook(workload, alloc).pre_create())
    assert config.cpuset_cpus == (1, 4)
    assert config.cpuset_mems == (0, 1)
    assert config.env_vars == dict.fromkeys(THREAD_COUNT_VARS, "2")
    assert "OMP_NUM_THREADS" in config.env_vars
    # stateless: a hook rebuilt from the same inputs (an agent restart) gives the same config
    again = asyncio.run(context.create_lifecycle_hook(workload, alloc).pre_create())
    assert again == config


def test_hook_without_cores_leaves_the_workload_unpinned(two_node_host: Path) -> None:
    plugin = started(CPUPlugin({}, root=two_node_host))
    context = plugin.create_agent_context(AgentId("a1"), DevicePartition.of("0"))
    hook = context.create_lifecycle_hook(Workload.process_tree("pid:1"), {})
    assert asyncio.run(hook.pre_create()) == WorkloadConfig()


def test_hook_without_numa_information_sets_no_memory_nodes() -> None:
    hook = CPULifecycleHook(
        Workload.process_tree("pid:1"),
        {CPU: {DeviceId("3"): Decimal(1)}},
        devices={DeviceId("3"): ComputeDevice("cpu", DeviceId("3"), "cpu3", None, 0, 1)},
    )
    config = asyncio.run(hook.pre_create())
    assert config.cpuset_cpus == (3,)
    assert config.cpuset_mems is None


def test_hook_refuses_device_ids_that_are_not_cores() -> None:
    hook = CPULifecycleHook(Workload.process_tree("pid:1"), {CPU: {DeviceId("cpu3"): Decimal(1)}})
    with pytest.raises(InvalidResourceArgument, match="not a core number"):
        asyncio.run(hook.pre_create())


def test_the_real_plugin_matches_the_affinity_mask() -> None:
    plugin = started(CPUPlugin({}))
    assert [d.device_id for d in plugin.devices] == [
        str(c) for c in sorted(os.sched_getaffinity(0))
    ]


class TestConformance(PluginConformance):
    @pytest.fixture
    def plugin(self) -> CPUPlugin:
        return CPUPlugin({})
