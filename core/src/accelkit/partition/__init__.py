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
from accelkit.partition.partitioner import PartitionResult, ResourcePartitioner
from accelkit.partition.reserve import Reservation

__all__ = [
    "DevicePartition",
    "GlobalDeviceInfo",
    "GlobalDeviceMap",
    "Partition",
    "PartitionResult",
    "Reservation",
    "ResourceAssignments",
    "ResourcePartitioner",
    "SlotPartition",
    "distribute_devices",
    "natural_sort_key",
]
