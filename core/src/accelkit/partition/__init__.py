"""Splitting a node's devices among agents (DESIGN §6)."""

from __future__ import annotations

from accelkit.partition.model import (
    DevicePartition,
    GlobalDeviceInfo,
    GlobalDeviceMap,
    Partition,
    ResourceAssignments,
    SlotPartition,
)
from accelkit.partition.ordering import distribute_devices, natural_sort_key

__all__ = [
    "DevicePartition",
    "GlobalDeviceInfo",
    "GlobalDeviceMap",
    "Partition",
    "ResourceAssignments",
    "SlotPartition",
    "distribute_devices",
    "natural_sort_key",
]
