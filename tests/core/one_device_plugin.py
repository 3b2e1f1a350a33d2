"""The least plugin the loader, the node and the metrics accept: one device, one count slot."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal

from accelkit.plugin import AbstractComputePlugin, AbstractLifecycleHook
from accelkit.types import (
    ComputeDevice,
    DeviceId,
    DeviceSlotInfo,
    SlotName,
    SlotSpec,
    SlotType,
    WorkloadConfig,
)


class EmptyHook(AbstractLifecycleHook):
    """Gives a workload nothing: no env values, mounts or devices."""

    async def pre_create(self) -> WorkloadConfig:
        return WorkloadConfig()


class OneDevicePlugin(AbstractComputePlugin):
    """The device ``<key>0``, offered as one unit of the count slot ``<key>.device``.

    A test subclasses it with its ``key`` and the behaviour it looks at.
    """

    lifecycle_hook_class = EmptyHook

    async def list_devices(self) -> Sequence[ComputeDevice]:
        return [ComputeDevice(self.key, DeviceId(f"{self.key}0"), "here", 0, 0, 1)]

    def configurable_slots(self) -> Sequence[SlotSpec]:
        return [SlotSpec(SlotName(f"{self.key}.device"), SlotType.COUNT)]

    def device_slots(self, devices: Iterable[ComputeDevice]) -> Mapping[DeviceId, DeviceSlotInfo]:
        slot = SlotName(f"{self.key}.device")
        return {d.device_id: DeviceSlotInfo(SlotType.COUNT, slot, Decimal(1)) for d in devices}
