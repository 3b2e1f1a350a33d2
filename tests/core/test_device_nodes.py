"""The accelerator device nodes a workload is denied: plugins' DEVICE mounts for a container."""

from __future__ import annotations

import asyncio
from decimal import Decimal

from accelkit.errors import WorkloadCreationDenied
from accelkit.types import (
    ComputeDevice,
    DeviceId,
    DeviceName,
    DeviceSlotInfo,
    Mount,
    SlotName,
    WorkloadConfig,
    WorkloadType,
)
from accelkit.workload.device_nodes import denied_device_nodes

SLOT = SlotName("npu.device")


class NodeHook:
    """Like the cuda hook: nodes only for containers, one per device plus a control node."""

    def __init__(self, workload, device_alloc, devices, *, broken=False):
        self.workload = workload
        self.ids = sorted(device_alloc.get(SLOT, {}))
        self.broken = broken

    async def pre_create(self) -> WorkloadConfig:
        if self.broken:
            raise WorkloadCreationDenied("npu: driver gone")
        if self.workload.type is not WorkloadType.CONTAINER:
            return WorkloadConfig()
        nodes = [f"/dev/npu{i.removeprefix('npu')}" for i in self.ids]
        control = ["/dev/npuctl"] if self.ids else []
        return WorkloadConfig(mounts=[Mount.device(p) for p in nodes + control])


class NodePlugin:
    def __init__(self, count: int, *, broken: bool = False) -> None:
        self.broken = broken
        self.devices = tuple(
            ComputeDevice(DeviceName("npu"), DeviceId(f"npu{i}"), f"pci:{i}", 0, 0, 0)
            for i in range(count)
        )

    def device_slots(self, devices):
        return {d.device_id: DeviceSlotInfo("count", SLOT, Decimal(1)) for d in devices}

    def create_lifecycle_hook(self, workload, device_alloc, devices):
        return NodeHook(workload, device_alloc, devices, broken=self.broken)


def test_the_nodes_of_devices_not_granted_are_denied():
    plugins = {DeviceName("npu"): NodePlugin(3)}
    allocation = {DeviceName("npu"): {SLOT: {DeviceId("npu1"): Decimal(1)}}}
    denied, problems = asyncio.run(denied_device_nodes(plugins, allocation, Decimal(5)))
    assert denied == {"/dev/npu0", "/dev/npu2"}  # the control node is granted with any device
    assert problems == []


def test_a_workload_without_the_plugins_devices_is_denied_all_of_them():
    plugins = {DeviceName("npu"): NodePlugin(2)}
    denied, _ = asyncio.run(denied_device_nodes(plugins, {}, Decimal(5)))
    assert denied == {"/dev/npu0", "/dev/npu1", "/dev/npuctl"}


def test_a_plugin_whose_hook_fails_is_named_and_its_nodes_not_denied():
    plugins = {DeviceName("npu"): NodePlugin(2, broken=True), DeviceName("gpu"): NodePlugin(1)}
    denied, problems = asyncio.run(denied_device_nodes(plugins, {}, Decimal(5)))
    assert denied == {"/dev/npu0", "/dev/npuctl"}  # the working plugin's
    assert problems == ["cannot tell the device nodes of plugin 'npu': npu: driver gone"]
