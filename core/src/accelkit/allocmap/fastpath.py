"""Specialised allocate/free for a map of one single-device slot (the ``mem`` root).

Such a map needs no placement decision, and allocate/free then cost little more than the
Python call itself, so attribute lookups and checks dominate. The closures here keep
everything they need in local cells and handle only the plain case: one slot, one known
Decimal amount, enough room. Anything else (and every error except the plain "not enough
free") goes to the general methods, which validate it fully.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

from accelkit.allocmap.affinity import AffinityHint
from accelkit.allocmap.checks import insufficient
from accelkit.allocmap.operations import MapOperations
from accelkit.types import DeviceAllocation, SlotName


def _overrides(m: MapOperations) -> bool:
    """Whether ``m``'s class overrides allocate or free (those must always be called)."""
    return type(m).allocate is not MapOperations.allocate or type(m).free is not MapOperations.free


def install(m: MapOperations) -> None:
    """Give ``m`` specialised ``allocate`` and ``free`` if it is a one-device, one-slot map."""
    pools = list(m._pools.values())
    if _overrides(m) or len(pools) != 1 or not pools[0].simple:
        return
    pool = pools[0]
    slot, dev, units_of, free = pool.name, pool.ids[0], pool.units_of, pool.free
    acquire, release = m._acquire, m._release
    amount_of = m._amount
    general_allocate, general_free = m.allocate, m.free

    def allocate(
        slots: Mapping[SlotName, Decimal],
        *,
        affinity_hint: AffinityHint | None = None,
        context_tag: str | None = None,
    ) -> DeviceAllocation:
        if len(slots) == 1:
            raw = slots.get(slot)
            if raw.__class__ is Decimal:
                try:
                    units = units_of.get(raw)
                except TypeError:  # a signalling NaN cannot be hashed
                    units = None
                if units is not None:
                    acquire()
                    try:
                        if units > pool.total_free:
                            free_amount = amount_of(pool, pool.total_free)
                            raise insufficient(pool, raw, free_amount, context_tag)
                        free[0] -= units
                        pool.total_free -= units
                        return {slot: {dev: raw}}
                    finally:
                        release()
        return general_allocate(slots, affinity_hint=affinity_hint, context_tag=context_tag)

    def free_(alloc: DeviceAllocation) -> None:
        if len(alloc) == 1:
            per_device = alloc.get(slot)
            if per_device is not None and len(per_device) == 1:
                raw = per_device.get(dev)
                if raw.__class__ is Decimal:
                    try:
                        units = units_of.get(raw)
                    except TypeError:
                        units = None
                    if units is not None:
                        acquire()
                        try:
                            if units <= pool.total_cap - pool.total_free:
                                free[0] += units
                                pool.total_free += units
                                return
                        finally:
                            release()
        general_free(alloc)

    allocate.__doc__ = general_allocate.__doc__
    free_.__doc__ = general_free.__doc__
    # Instance attributes shadow the class's methods for this map only.
    vars(m).update(allocate=allocate, free=free_)
