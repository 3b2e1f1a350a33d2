"""The fast path of FILL maps of one slot over a few devices (:class:`ScannedPool`): W3 FILL.

FILL takes the most free device, or the most free devices in turn when none holds the
request. Over a few devices ``max(free)`` and ``free.index`` find it for less than keeping
free-amount buckets up to date costs on every allocate and free, so the pool keeps none and
an allocate or free changes two numbers per device. Everything unusual goes to the general,
validating methods, exactly as in :mod:`accelkit.allocmap.fastpath`, whose rules (one slot,
a Decimal amount converted before, both paths under the map's lock) hold here too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from decimal import Decimal

from accelkit.allocmap.affinity import AffinityHint
from accelkit.allocmap.operations import MapOperations
from accelkit.allocmap.placement import Grants
from accelkit.allocmap.pool import ScannedPool
from accelkit.errors import refusal
from accelkit.types import DeviceAllocation, DeviceId, SlotName


def install(m: MapOperations, pool: ScannedPool) -> None:
    """Give ``m``, a map of the one slot of ``pool``, the fast ``allocate`` and ``free``."""
    general_allocate, general_free = m.allocate, m.free
    allocate = _allocate(m, pool, general_allocate)
    free_ = _free(m, pool, general_free)
    allocate.__doc__ = general_allocate.__doc__
    free_.__doc__ = general_free.__doc__
    vars(m).update(allocate=allocate, free=free_)


def _allocate(
    m: MapOperations, pool: ScannedPool, general: Callable[..., DeviceAllocation]
) -> Callable[..., DeviceAllocation]:
    slot, units_of, amount_of = pool.name, pool.units_of, pool.amount_of
    free, ids, where = pool.free, pool.ids, pool.free.index
    acquire, release = m._acquire, m._release
    amount, place = m._amount, m._place

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
                if units:
                    left = pool.total_free
                    if units > left and not pool.hidden:
                        # refused on a snapshot, as in fastpath's closures
                        raise refusal(
                            slot, raw, amount_of.get(left) or amount(pool, left), context_tag
                        )
                    acquire()
                    try:
                        if units <= pool.total_free:
                            if affinity_hint is None:
                                pool.total_free -= units
                                most = max(free)
                                i = where(most)  # the first device of the most free
                                if most >= units:
                                    free[i] = most - units
                                    return {slot: {ids[i]: raw}}
                                # W3 FILL's splits: the most free devices in turn
                                out: dict[DeviceId, Decimal] = {}
                                while most < units:
                                    if not most:  # cannot be: total_free said there was room
                                        msg = "the pool had less free than its total said"
                                        raise AssertionError(msg)
                                    out[ids[i]] = amount_of.get(most) or amount(pool, most)
                                    free[i] = 0
                                    units -= most
                                    most = max(free)
                                    i = where(most)
                                free[i] = most - units
                                out[ids[i]] = amount_of.get(units) or amount(pool, units)
                                return {slot: out}
                            grants = place(pool, units, affinity_hint, raw)
                            pool.shift(grants, 1)
                            if len(grants) == 1:
                                return {slot: {ids[grants[0][0]]: raw}}
                            return {
                                slot: {
                                    ids[i]: amount_of.get(u) or amount(pool, u) for i, u in grants
                                }
                            }
                    finally:
                        release()
                    # another thread took the room since the snapshot: the general path says so
        return general(slots, affinity_hint=affinity_hint, context_tag=context_tag)

    return allocate


def _free(
    m: MapOperations, pool: ScannedPool, general: Callable[[DeviceAllocation], None]
) -> Callable[[DeviceAllocation], None]:
    slot, units_of, index, gate, free = pool.name, pool.units_of, pool.index, pool.gate, pool.free
    acquire, release = m._acquire, m._release

    def free_(alloc: DeviceAllocation) -> None:  # noqa: PLR0912 - one frame (module docstring)
        if len(alloc) == 1:
            per_device = alloc.get(slot)
            if per_device is not None:
                try:
                    if len(per_device) == 1:
                        (dev,) = per_device
                        raw = per_device[dev]
                        units = units_of.get(raw) if raw.__class__ is Decimal else None
                        i = index.get(dev)
                        if units and i is not None:
                            acquire()
                            try:
                                new = free[i] + units
                                if new <= gate[i]:  # -1 when unavailable
                                    free[i] = new
                                    pool.total_free += units
                                    return
                            finally:
                                release()
                    else:
                        grants: Grants = []
                        acquire()
                        try:
                            # validate every entry first (a refused free changes nothing)
                            for dev, raw in per_device.items():
                                units = units_of.get(raw) if raw.__class__ is Decimal else None
                                i = index.get(dev)
                                if not units or i is None or units > gate[i] - free[i]:
                                    break
                                grants.append((i, units))
                            else:
                                total = 0
                                for i, units in grants:
                                    free[i] += units
                                    total += units
                                pool.total_free += total
                                return
                        finally:
                            release()
                except (TypeError, AttributeError):  # unhashable amounts, not a mapping
                    pass
        general(alloc)

    return free_
