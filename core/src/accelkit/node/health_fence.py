"""A fence for alloc maps that cannot exclude devices themselves (no ``set_unavailable``).

:class:`FencedMap` wraps such a map: while no device is unavailable it passes every call
through; otherwise a request is placed on a scratch map of the same plugin over the available
devices only (holding their current allocations), and the grant it finds is applied to the
wrapped map, so the result is what the plugin's own map would grant without those devices.
Frees and applies of existing allocations go to the wrapped map unchanged.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from accelkit.allocmap import AbstractAllocMap, AffinityHint
from accelkit.errors import InsufficientResource
from accelkit.types import DeviceAllocation, DeviceId, DeviceSlotInfo, SlotName

__all__ = ["FencedMap"]

MapFactory = Callable[[Mapping[DeviceId, DeviceSlotInfo], frozenset[DeviceId]], AbstractAllocMap]


class FencedMap:
    """``inner`` with :meth:`set_unavailable`; every other attribute is ``inner``'s."""

    def __init__(self, inner: AbstractAllocMap, factory: MapFactory) -> None:
        self.inner = inner
        self._factory = factory
        self._unavailable: frozenset[DeviceId] = frozenset()
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def unavailable_devices(self) -> frozenset[DeviceId]:
        """The devices that take no new grant."""
        return self._unavailable

    def set_unavailable(self, device_ids: frozenset[DeviceId]) -> None:
        """Keep ``device_ids`` out of new grants (the wrapped map's other devices only)."""
        self._unavailable = frozenset(device_ids) & frozenset(self.inner.device_slots)

    def allocate(
        self,
        slots: Mapping[SlotName, Decimal],
        *,
        affinity_hint: AffinityHint | None = None,
        context_tag: str | None = None,
    ) -> DeviceAllocation:
        """The wrapped map's grant, never on an unavailable device."""
        fenced = self._unavailable
        if not fenced:
            return self.inner.allocate(slots, affinity_hint=affinity_hint, context_tag=context_tag)
        with self._lock:
            available = {d: s for d, s in self.inner.device_slots.items() if d not in fenced}
            scratch = self._factory(available, self.inner.device_mask - fenced)
            held = {
                slot: {d: amount for d, amount in per_device.items() if d in available and amount}
                for slot, per_device in self.inner.allocations.items()
            }
            scratch.apply_allocation({s: a for s, a in held.items() if a})
            try:
                grant = scratch.allocate(
                    slots, affinity_hint=affinity_hint, context_tag=context_tag
                )
            except InsufficientResource as exc:
                names = ", ".join(sorted(fenced))
                text = f"{exc} (unavailable, unhealthy or cordoned: {names})"
                raise InsufficientResource(
                    text,
                    slot=exc.slot,
                    requested=exc.requested,
                    allocatable=exc.allocatable,
                    context_tag=exc.context_tag,
                ) from None
            self.inner.apply_allocation(grant)
            return grant
