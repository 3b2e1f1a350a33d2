"""Capacities of partitions and the scaling factors derived from them."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import ROUND_DOWN, Context, Decimal

from accelkit.partition.model import GlobalDeviceInfo, Partition, SlotPartition
from accelkit.types import SlotName

# Rounding down keeps every slot's factors adding up to at most 1.
_FACTOR = Context(prec=12, rounding=ROUND_DOWN)
_ZERO = Decimal(0)
_ONE = Decimal(1)


def partition_capacity(info: GlobalDeviceInfo, partition: Partition) -> dict[SlotName, Decimal]:
    """What a partition of ``info``'s devices holds per slot (zeros for slots it lacks)."""
    totals = dict.fromkeys((i.slot_name for i in info.device_slots.values()), _ZERO)
    for device_id in partition.device_ids:
        slot = info.device_slots.get(device_id)
        if slot is not None:
            totals[slot.slot_name] += slot.amount
    if isinstance(partition, SlotPartition):
        for name, cap in partition.slots.items():
            totals[name] = min(totals.get(name, _ZERO), cap)
    return totals


def scaling_factors(
    capacity: Mapping[SlotName, Decimal], allocatable: Mapping[SlotName, Decimal]
) -> dict[SlotName, Decimal]:
    """Per slot: the agent's capacity over the node's allocatable capacity, rounded down.

    A slot the node has none of to allocate scales by 0.
    """
    factors: dict[SlotName, Decimal] = {}
    for slot, node in allocatable.items():
        mine = capacity.get(slot, _ZERO)
        factors[slot] = _ZERO if node <= 0 else min(_ONE, _FACTOR.divide(mine, node))
    return factors


def plain_amounts(amounts: Mapping[SlotName, Decimal]) -> dict[str, Decimal]:
    """Amounts keyed by plain ``str``, as :class:`SlotPartition` takes them."""
    return {str(k): v for k, v in amounts.items()}
