"""What each agent is given: a set of devices, or an amount of a shared slot."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

import attrs

from accelkit.plugin import PluginRole
from accelkit.reprs import attrs_eq, attrs_hash, attrs_repr
from accelkit.types import (
    AgentId,
    ComputeDevice,
    DeviceId,
    DeviceName,
    DeviceSlotInfo,
    SlotName,
    to_decimal,
)


def _device_ids(value: Iterable[str]) -> tuple[DeviceId, ...]:
    if isinstance(value, str):  # it would split into one-letter ids
        msg = f"device_ids must be a collection of ids, not the string {value!r}"
        raise TypeError(msg)
    return tuple(DeviceId(str(v)) for v in value)


def _slot_amounts(value: Mapping[Any, Any]) -> Mapping[SlotName, Decimal]:
    amounts = {SlotName(str(k)): to_decimal(v) for k, v in value.items()}
    for slot, amount in amounts.items():
        if amount < 0:
            msg = f"slot {slot!r}: a partition's amount must not be negative, got {amount}"
            raise ValueError(msg)
    return amounts


@attrs.frozen(repr=False)
class DevicePartition:
    """Whole devices given to one agent: cpu cores, accelerators."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    device_ids: tuple[DeviceId, ...] = attrs.field(converter=_device_ids)

    @classmethod
    def of(cls, *ids: str) -> DevicePartition:
        return cls(tuple(DeviceId(i) for i in ids))

    @property
    def device_mask(self) -> frozenset[DeviceId]:
        return frozenset(self.device_ids)


@attrs.frozen(repr=False)
class SlotPartition:
    """An amount of a resource shared by amount (memory), on the given devices.

    ``device_ids`` are the devices the amount may come from; ``slots`` caps each slot's total.
    """

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    slots: Mapping[SlotName, Decimal] = attrs.field(converter=_slot_amounts)
    device_ids: tuple[DeviceId, ...] = attrs.field(default=(), converter=_device_ids)

    @property
    def device_mask(self) -> frozenset[DeviceId]:
        return frozenset(self.device_ids)


Partition = DevicePartition | SlotPartition
ResourceAssignments = Mapping[AgentId, Mapping[DeviceName, Partition]]


def _devices(value: Iterable[ComputeDevice]) -> tuple[ComputeDevice, ...]:
    return tuple(value)


def _device_slots(
    value: Mapping[DeviceId, DeviceSlotInfo],
) -> Mapping[DeviceId, DeviceSlotInfo]:
    return dict(value)


@attrs.frozen(repr=False)
class GlobalDeviceInfo:
    """Everything partitioning needs to know of one plugin's devices on the node."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    device_name: DeviceName
    devices: tuple[ComputeDevice, ...] = attrs.field(converter=_devices)
    device_slots: Mapping[DeviceId, DeviceSlotInfo] = attrs.field(converter=_device_slots)
    shared_by_amount: bool = False  # True for memory: split by amount, not by device
    role: PluginRole = PluginRole.ACCELERATOR  # the plugin's role: cores, memory, accelerator

    @property
    def device_ids(self) -> tuple[DeviceId, ...]:
        return tuple(d.device_id for d in self.devices)


GlobalDeviceMap = Mapping[DeviceName, GlobalDeviceInfo]


def provider(device_map: GlobalDeviceMap, role: PluginRole) -> DeviceName | None:
    """The device name of the plugin playing ``role`` (cores, memory), or ``None``."""
    return next((name for name, info in device_map.items() if info.role is role), None)
