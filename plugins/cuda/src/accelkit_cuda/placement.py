"""An alloc map that grants whole GPUs as close together as the topology allows.

For a request of whole GPUs alone (``cuda.device``, any count), the map picks the GPUs with
:func:`accelkit_cuda.topology.choose` among those free, available and in the mask, and books
exactly those (``apply_allocation``, atomic); a NUMA hint only breaks ties, by trying the hinted
nodes' GPUs first. Every other request (MIG slots, several slots at once, a malformed amount)
and a choice another thread beat to a GPU go to the standard discrete map, which also words
every refusal. A node whose topology NVML does not tell gets the standard map.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal

from accelkit import (
    AffinityHint,
    AllocationStrategy,
    DiscretePropertyAllocMap,
    InvalidResourceArgument,
)
from accelkit.types import DeviceAllocation, DeviceId, DeviceSlotInfo, SlotName, SlotSpec
from accelkit_cuda.slots import DEVICE_SLOT
from accelkit_cuda.topology import Topology, choose


class TopologyAllocMap(DiscretePropertyAllocMap):
    """A discrete map whose whole-GPU grants follow the GPU topology."""

    def __init__(
        self,
        device_slots: Mapping[DeviceId, DeviceSlotInfo],
        *,
        topology: Topology,
        device_mask: Iterable[DeviceId] | None = None,
        exclusive_slot_types: Iterable[str] = (),
        strategy: AllocationStrategy = AllocationStrategy.EVENLY,
        slot_specs: Iterable[SlotSpec] = (),
    ) -> None:
        super().__init__(
            device_slots,
            device_mask=device_mask,
            exclusive_slot_types=exclusive_slot_types,
            strategy=strategy,
            slot_specs=slot_specs,
        )
        self.topology = topology

    def allocate(
        self,
        slots: Mapping[SlotName, Decimal],
        *,
        affinity_hint: AffinityHint | None = None,
        context_tag: str | None = None,
    ) -> DeviceAllocation:
        chosen = self._close_gpus(slots, affinity_hint)
        if chosen is not None:
            grant = {DEVICE_SLOT: {d: Decimal(1) for d in chosen}}
            try:
                self.apply_allocation(grant)
            except InvalidResourceArgument:
                pass  # another caller took one of them first: the standard map decides
            else:
                return grant
        return super().allocate(slots, affinity_hint=affinity_hint, context_tag=context_tag)

    def _close_gpus(
        self, slots: Mapping[SlotName, Decimal], hint: AffinityHint | None
    ) -> list[DeviceId] | None:
        """The GPUs a request of whole GPUs alone should get; ``None``: not such a request,
        or not enough free GPUs (the standard map refuses it in its words)."""
        wanted = {s: a for s, a in slots.items() if a != 0} if isinstance(slots, Mapping) else {}
        amount = wanted.get(DEVICE_SLOT)
        if len(wanted) != 1 or not isinstance(amount, Decimal | int) or isinstance(amount, bool):
            return None
        if amount != int(amount) or amount < 1:
            return None
        held = self.allocations.get(DEVICE_SLOT, {})
        infos = self.device_slots
        unavailable = self.unavailable_devices
        free = [
            d
            for d in self.topology.devices
            if d in held and not held[d] and d not in unavailable and d in infos
        ]
        if len(free) < amount:
            return None
        if hint is not None and hint.numa_nodes:
            free.sort(key=lambda d: infos[d].numa_node not in hint.numa_nodes)
        return choose(self.topology, free, int(amount))
