"""What the plugin base classes do for an author: hook and context factories, shares maps."""

from __future__ import annotations

import asyncio
from decimal import Decimal

import pytest

from accelkit.allocmap import FractionAllocMap
from accelkit.partition import DevicePartition
from accelkit.plugin import AbstractComputePlugin, AbstractLifecycleHook, MaskedAgentContext
from accelkit.types import (
    AgentId,
    ComputeDevice,
    DeviceId,
    DeviceSlotInfo,
    SlotSpec,
    SlotType,
    Workload,
    WorkloadConfig,
)


class Hook(AbstractLifecycleHook):
    async def pre_create(self) -> WorkloadConfig:
        return WorkloadConfig(env_vars={"DEVICES": ",".join(self.allocated_device_ids)})


class Context(MaskedAgentContext):
    pass


class Plugin(AbstractComputePlugin):
    key = "npu"
    lifecycle_hook_class = Hook
    agent_context_class = Context

    async def list_devices(self):
        return [ComputeDevice("npu", f"npu{i}", "here", 0, 0, 1) for i in range(3)]

    def configurable_slots(self):
        return [SlotSpec("npu.shares", SlotType.COUNT)]

    def device_slots(self, devices):
        return {d.device_id: DeviceSlotInfo("count", "npu.shares", 1) for d in devices}

    def create_alloc_map(self, device_slots, device_mask):
        return self.fraction_alloc_map(device_slots, device_mask, quantum_size=Decimal("0.5"))


def test_a_concrete_plugin_without_a_hook_is_refused_at_class_creation():
    with pytest.raises(TypeError, match="Hookless must set lifecycle_hook_class"):

        class Hookless(AbstractComputePlugin):
            key = "x"

            async def list_devices(self):
                return []

            def configurable_slots(self):
                return []

            def device_slots(self, devices):
                return {}


def test_an_abstract_intermediate_class_needs_no_hook_yet():
    class Intermediate(AbstractComputePlugin):
        key = "x"

    with pytest.raises(TypeError, match="Intermediate"):
        Intermediate()  # type: ignore[abstract]


def test_class_attributes_build_the_context_and_the_hook():
    plugin = Plugin()
    asyncio.run(plugin.discover())
    ctx = plugin.create_agent_context(AgentId("a"), DevicePartition.of("npu1", "npu2"))
    assert type(ctx) is Context
    assert isinstance(ctx.alloc_map, FractionAllocMap)
    alloc = ctx.alloc_map.allocate({"npu.shares": Decimal("1.5")})
    assert sum(alloc["npu.shares"].values()) == Decimal("1.5")
    assert set(alloc["npu.shares"]) <= {DeviceId("npu1"), DeviceId("npu2")}
    hook = ctx.create_lifecycle_hook(Workload("w"), alloc)
    assert type(hook) is Hook
    assert set(hook.devices) == set(alloc["npu.shares"])
    config = asyncio.run(hook.pre_create())
    assert set(config.env_vars["DEVICES"].split(",")) == set(alloc["npu.shares"])


class ManyPlugin(Plugin):
    async def list_devices(self):
        return [ComputeDevice("npu", f"npu{i}", "here", 0, 0, 1) for i in range(40)]


@pytest.mark.parametrize("count", [1, 3, 10, 40])
def test_the_devices_of_an_allocation_come_in_the_agents_order_however_many(count):
    plugin = ManyPlugin()
    asyncio.run(plugin.discover())
    ctx = plugin.create_agent_context(
        AgentId("a"), DevicePartition.of(*(f"npu{i}" for i in range(40)))
    )
    ids = [f"npu{i}" for i in range(0, 40, 40 // count)][:count]
    alloc = {"npu.shares": {DeviceId(i): Decimal(1) for i in reversed(ids)}}
    assert [d.device_id for d in ctx.alloc_to_devices(alloc)] == ids
    ctx.devices = tuple(reversed(ctx.devices))  # a context's devices replaced: looked up anew
    assert [d.device_id for d in ctx.alloc_to_devices(alloc)] == list(reversed(ids))
    zero = {"npu.shares": {DeviceId("npu1"): Decimal(0)}}
    assert ctx.alloc_to_devices(zero) == ()
