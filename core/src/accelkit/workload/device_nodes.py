"""The accelerator device nodes of a node, and those one allocation grants, as plugins name them.

A plugin names a device's nodes in the DEVICE mounts its hook gives a *container* (a process
tree needs none: its nodes are already at their paths). So the runner asks each plugin's hook,
for a container workload, over all of the plugin's devices (every node of the node) and over the
workload's own allocation (the nodes it is granted). The process runtime denies the difference.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

from accelkit.calls import call_async
from accelkit.plugin import AbstractComputePlugin
from accelkit.types import (
    ComputeDevice,
    DeviceAllocation,
    DeviceId,
    DeviceName,
    MountType,
    SlotName,
    Workload,
)

__all__ = ["denied_device_nodes"]

#: the workload the hooks are asked about: only its DEVICE mounts are read, nothing runs
_PROBE = Workload.container("accelkit-device-nodes")


def _whole(plugin: AbstractComputePlugin) -> DeviceAllocation:
    alloc: dict[SlotName, dict[DeviceId, Decimal]] = {}
    for device_id, info in plugin.device_slots(plugin.devices).items():
        alloc.setdefault(info.slot_name, {})[device_id] = info.amount
    return alloc


async def _nodes(
    key: DeviceName,
    plugin: AbstractComputePlugin,
    alloc: DeviceAllocation,
    timeout: Decimal,
) -> set[str]:
    devices: dict[DeviceId, ComputeDevice] = {d.device_id: d for d in plugin.devices}
    hook = plugin.create_lifecycle_hook(_PROBE, alloc, devices)
    config = await call_async(key, "pre_create", timeout, hook.pre_create)
    return {m.source for m in config.mounts if m.type is MountType.DEVICE}


async def denied_device_nodes(
    plugins: Mapping[DeviceName, AbstractComputePlugin],
    allocation: Mapping[DeviceName, DeviceAllocation],
    timeout: Decimal,
) -> tuple[frozenset[str], list[str]]:
    """The nodes of the node's devices that ``allocation`` does not grant, and problems.

    A plugin whose hook cannot be asked is left out, with a line saying so: its nodes are then
    not denied.
    """
    denied: set[str] = set()
    problems: list[str] = []
    for key, plugin in plugins.items():
        try:
            every = await _nodes(key, plugin, _whole(plugin), timeout)
            granted = set()
            if key in allocation:
                granted = await _nodes(key, plugin, allocation[key], timeout)
        except Exception as exc:  # a plugin's failure must not stop the run
            problems.append(f"cannot tell the device nodes of plugin {key!r}: {exc}")
            continue
        denied |= every - granted
    return frozenset(denied), problems
