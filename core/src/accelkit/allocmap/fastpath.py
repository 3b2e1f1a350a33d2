"""The one fast path of ``allocate`` and ``free``: one slot, amounts seen before.

At a microsecond per call, attribute lookups, method calls and argument passing are most of
an alloc map's cost, so every map gets functions of its own (closures that keep what they need
in cells, or, for the two layouts below that name their modules, copies that read it as their
globals: :mod:`accelkit.allocmap.namespaced`) that handle the common case in one frame: one
slot, a Decimal amount the map has converted before (the conversion cache only ever holds
validated positive amounts), no exclusive slot check (one slot cannot clash with itself).
Everything else, and every error except "not enough free", goes to the general methods of
:class:`~accelkit.allocmap.operations.MapOperations`, which validate fully. Both paths run
under the map's lock, so the fast path is exactly as atomic and thread-safe as the general one.

The special cases kept inside those functions, and the benchmark rows they buy
(``tests/benchmarks``):

- a one-device pool (a ``mem`` root) needs no placement and hands out one read-only grant per
  amount (:mod:`accelkit.allocmap.onedevice`): W4, all four rows;
- a FILL map of one slot over a few devices keeps no buckets and has functions of its own
  (:mod:`accelkit.allocmap.fillscan`): W3 FILL;
- a map of one slot over several devices knows its pool, finds the slot with one lookup and
  holds the pool's indexes in cells: W1, W2 and W3 EVENLY;
- a grant on one device keeps the caller's own Decimal and updates one bucket inline: W3 EVENLY
  (most requests fit one device), W1/W2 single-core and single-GPU requests;
- FILL (discrete, and fraction with fragmentation allowed) places a request without a hint
  with FILL's one rule written out for the pool's buckets (:mod:`accelkit.allocmap.fillrule`),
  placed and taken in one pass: the W1/W2 FILL rows;
- freeing several devices of one slot validates in the same frame: W3 EVENLY's split grants and
  every W1/W2 multi-device grant;
- the map's lock is taken and given back inline, as a ``list.pop`` and a ``list.append``
  (:mod:`accelkit.allocmap.maplock`): a ``threading.Lock`` cost a fifth of W4's allocate and
  free.

Unavailable devices (``set_unavailable``) add no check here: placement never sees their free
units (:meth:`~accelkit.allocmap.pool.SlotPool.fence`), a free on one of them fails the ``gate``
comparison the fast path makes anyway and goes to the general path, and a refusal while some
device is unavailable is left to the general path, which names them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from decimal import Decimal

from frozendict import frozendict

from accelkit.allocmap import fillrule, onedevice
from accelkit.allocmap.affinity import AffinityHint
from accelkit.allocmap.maplock import MapLock, inlined
from accelkit.allocmap.operations import MapOperations
from accelkit.allocmap.placement import Grants
from accelkit.allocmap.pool import CACHE_LIMIT, ScannedPool, SlotPool
from accelkit.allocmap.shared import SharedGrants
from accelkit.errors import InsufficientResource, refusal
from accelkit.types import DeviceAllocation, DeviceId, SlotName

#: the mapping types the fast paths of free read directly (grants as allocate returns them and
#: as JSON restores them); any other goes to the general path, which checks it is a mapping
_PLAIN = (dict, frozendict)

#: the placement of a request without a hint: ``(pool, units, requested) -> grants``
QuickPlace = Callable[[SlotPool, int, Decimal], Grants]


def _overrides(m: MapOperations) -> bool:
    """Whether ``m``'s class overrides allocate or free (those must always be called)."""
    return type(m).allocate is not MapOperations.allocate or type(m).free is not MapOperations.free


def install(m: MapOperations, quick_place: QuickPlace) -> None:
    """Give ``m`` the fast ``allocate`` and ``free``; ``quick_place`` places hint-less requests."""
    if _overrides(m):
        return
    pools = list(m._pools.values())
    if len(pools) == 1 and pools[0].simple:
        onedevice.install(m, pools[0])
    elif len(pools) == 1 and isinstance(pools[0], ScannedPool):
        from accelkit.allocmap import fillscan  # a W3-type FILL map's only

        fillscan.install(m, pools[0])
    elif len(pools) == 1 and pools[0].quick:
        _install_one_pool(m, pools[0], quick_place)
    else:
        _install_general(m, quick_place)


def _install_one_pool(m: MapOperations, pool: SlotPool, quick_place: QuickPlace) -> None:
    """W1, W2, W3 EVENLY: a map of one slot over several devices.

    The general closures, except that allocate knows its pool (the slot is found with one
    lookup and the pool's indexes are held in cells) and hands out the grants of
    :mod:`accelkit.allocmap.shared`, so a free of one of them is one lookup by ``id``.
    """
    general_allocate, general_free = m.allocate, m.free
    shared = SharedGrants(pool, m._amount)
    allocate = _one_pool_allocate(m, pool, shared, quick_place, general_allocate)
    free_ = _one_pool_free(m, pool, shared, _general_free(m, general_free))
    allocate.__doc__ = general_allocate.__doc__
    free_.__doc__ = general_free.__doc__
    vars(m).update(allocate=allocate, free=free_)


def _one_pool_allocate(
    m: MapOperations,
    pool: SlotPool,
    shared: SharedGrants,
    quick_place: QuickPlace,
    general_allocate: Callable[..., DeviceAllocation],
) -> Callable[..., DeviceAllocation]:
    slot, units_of, amount_of, buckets = pool.name, pool.units_of, pool.amount_of, pool.buckets
    free, bits, ids = pool.free, pool.bits, pool.ids
    by_device, make, live, adopt = shared.by_device, shared.make, shared.live, shared.adopt
    amount, place = m._amount, m._place
    take, put, wait, wake, waiters = inlined(m._lock)
    # FILL's rule (fillrule), written out for this pool's buckets and shared grants
    fill = fillrule.taking_shared(pool, shared, amount) if m._fills_most_free() else None

    def allocate(  # noqa: PLR0912 - one frame for the hot path (module docstring)
        slots: Mapping[SlotName, Decimal],
        *,
        affinity_hint: AffinityHint | None = None,
        context_tag: str | None = None,
    ) -> DeviceAllocation:
        if slots.__class__ is dict and len(slots) == 1:  # else the general path judges it
            raw = slots.get(slot)
            if raw.__class__ is Decimal:
                units = units_of.get(str(raw))
                if units:
                    left = pool.total_free
                    if units > left and not pool.hidden:
                        # refused on a snapshot, as in the general closure
                        allocatable = amount_of.get(left) or amount(pool, left)
                        raise refusal(InsufficientResource, slot, raw, allocatable, context_tag)
                    try:
                        take()
                    except IndexError:  # held by another thread (maplock)
                        wait()
                    try:
                        if units <= pool.total_free:
                            if fill is not None and affinity_hint is None:
                                return fill(units)  # FILL, placed and taken in one pass
                            grants = (
                                quick_place(pool, units, raw)
                                if affinity_hint is None
                                else place(pool, units, affinity_hint, raw)
                            )
                            if len(grants) > 1:
                                pool.shift(grants, 1)
                                result = {
                                    slot: {
                                        ids[i]: amount_of.get(u) or amount(pool, u)
                                        for i, u in grants
                                    }
                                }
                                if len(live) < CACHE_LIMIT:
                                    live[id(result)] = (result, grants)
                                return result
                            ((i, _),) = grants
                            bit = bits[i]
                            # one device, one bucket move
                            old = free[i]
                            free[i] = new = old - units
                            pool.total_free -= units
                            rest = buckets[old] ^ bit
                            if rest:
                                buckets[old] = rest
                            else:
                                del buckets[old]
                            if new:
                                buckets[new] = buckets.get(new, 0) | bit
                            return by_device[i].get(units) or make(i, units)
                    finally:
                        put(True)
                        if waiters:
                            wake()
                    # another thread took the room since the snapshot: the general path says so
        return adopt(general_allocate(slots, affinity_hint=affinity_hint, context_tag=context_tag))

    return allocate


def _one_pool_free(
    m: MapOperations,
    pool: SlotPool,
    shared: SharedGrants,
    checked: Callable[[DeviceAllocation], None],
) -> Callable[[DeviceAllocation], None]:
    """A free that knows this map's grants by ``id``; any other goes to ``checked``."""
    free, gate, bits = pool.free, pool.gate, pool.bits
    take, put, wait, wake, waiters = inlined(m._lock)
    issued, live = shared.issued, shared.live

    def free_(alloc: DeviceAllocation) -> None:  # noqa: PLR0912 - one frame for the hot path (fastpath's module docstring)
        hit = issued.get(key := id(alloc))
        if hit is not None:  # a shared grant of this map: one device, one bucket move
            i, units = hit
            try:
                take()
            except IndexError:  # held by another thread (maplock)
                wait()
            try:
                old = free[i]
                new = old + units
                if new <= gate[i]:  # -1 when unavailable
                    buckets, bit = pool.buckets, bits[i]
                    free[i] = new
                    pool.total_free += units
                    if old:
                        rest = buckets[old] ^ bit
                        if rest:
                            buckets[old] = rest
                        else:
                            del buckets[old]
                    buckets[new] = buckets.get(new, 0) | bit
                    return
            finally:
                put(True)
                if waiters:
                    wake()
        elif (split := live.pop(key, None)) is not None:  # a split this map handed out
            taken = split[1]
            try:
                take()
            except IndexError:  # held by another thread (maplock)
                wait()
            try:
                for i, units in taken:  # the room test first: a refused free changes nothing
                    if units > gate[i] - free[i]:
                        break
                else:
                    pool.shift(taken, -1)
                    return
            finally:
                put(True)
                if waiters:
                    wake()
        checked(alloc)

    return free_


def _install_general(m: MapOperations, quick_place: QuickPlace) -> None:
    """Every other map: maps of several slots, or of one UNIQUE slot."""
    general_allocate, general_free = m.allocate, m.free
    allocate = _general_allocate(m, quick_place, general_allocate)
    free_ = _general_free(m, general_free)
    allocate.__doc__ = general_allocate.__doc__
    free_.__doc__ = general_free.__doc__
    vars(m).update(allocate=allocate, free=free_)


def _general_allocate(  # noqa: PLR0915 - the hot path and its cells in one function
    m: MapOperations, quick_place: QuickPlace, general: Callable[..., DeviceAllocation]
) -> Callable[..., DeviceAllocation]:
    # quick pools: several devices, not UNIQUE (one-device pools of maps of several slots,
    # and UNIQUE requests, take the general path); a map's pools never change
    quick = {name: pool for name, pool in m._pools.items() if pool.quick}
    take, put, wait, wake, waiters = inlined(m._lock)
    amount = m._amount
    place = m._place
    # FILL's rule (fillrule), written out for each pool's buckets
    fills = {n: fillrule.taking_grants(p) for n, p in quick.items() if m._fills_most_free()}

    def allocate(  # noqa: PLR0912 - one frame for the hot path (module docstring)
        slots: Mapping[SlotName, Decimal],
        *,
        affinity_hint: AffinityHint | None = None,
        context_tag: str | None = None,
    ) -> DeviceAllocation:
        # (a request that is no dict, or no mapping at all, is the general path's to judge)
        if slots.__class__ is dict and len(slots) == 1:
            (slot,) = slots  # cheaper than unpacking items()
            raw = slots[slot]
            pool = quick.get(slot)
            if pool is not None and raw.__class__ is Decimal:
                units = pool.units_of.get(str(raw))
                if units:
                    left = pool.total_free
                    if units > left and not pool.hidden:
                        # Refused on a snapshot: a refusal changes nothing, so it needs no
                        # lock (it is what a locked call at the moment of the read would say).
                        # With unavailable devices the general path refuses, naming them.
                        allocatable = pool.amount_of.get(left) or amount(pool, left)
                        raise refusal(InsufficientResource, slot, raw, allocatable, context_tag)
                    try:
                        take()
                    except IndexError:  # held by another thread (maplock)
                        wait()
                    try:
                        if units <= pool.total_free:
                            buckets = pool.buckets
                            fill = fills.get(slot) if affinity_hint is None else None
                            if fill is not None:
                                grants = fill(units)  # FILL, placed and taken in one pass
                            else:
                                grants = (
                                    quick_place(pool, units, raw)
                                    if affinity_hint is None
                                    else place(pool, units, affinity_hint, raw)
                                )
                            if len(grants) > 1:
                                if fill is None:
                                    pool.shift(grants, 1)
                                ids, cached = pool.ids, pool.amount_of.get
                                return {
                                    slot: {ids[i]: cached(u) or amount(pool, u) for i, u in grants}
                                }
                            ((i, _),) = grants
                            if fill is not None:
                                return {slot: {pool.ids[i]: raw}}
                            # W3 EVENLY, W1/W2 requests of one unit: one bucket move.
                            free, bit = pool.free, pool.bits[i]
                            old = free[i]
                            free[i] = new = old - units
                            pool.total_free -= units
                            rest = buckets[old] ^ bit
                            if rest:
                                buckets[old] = rest
                            else:
                                del buckets[old]
                            if new:
                                buckets[new] = buckets.get(new, 0) | bit
                            return {slot: {pool.ids[i]: raw}}
                    finally:
                        put(True)
                        if waiters:
                            wake()
                    # another thread took the room since the snapshot: the general path says so
        return general(slots, affinity_hint=affinity_hint, context_tag=context_tag)

    return allocate


def _general_free(
    m: MapOperations, general: Callable[[DeviceAllocation], None]
) -> Callable[[DeviceAllocation], None]:
    quick = {name: pool for name, pool in m._pools.items() if pool.quick}
    take, put, wait, wake, waiters = inlined(m._lock)

    def free_(alloc: DeviceAllocation) -> None:  # noqa: PLR0912 - one frame for the hot path (fastpath's module docstring)
        if alloc.__class__ in _PLAIN and len(alloc) == 1:  # else the general path judges it
            (slot,) = alloc
            per_device = alloc[slot]
            pool = quick.get(slot)
            if pool is not None:
                try:
                    if len(per_device) == 1:
                        # W3 EVENLY, W1/W2 grants of one device: one bucket move, inline.
                        (dev,) = per_device
                        raw = per_device[dev]
                        units = pool.units_of.get(str(raw)) if raw.__class__ is Decimal else None
                        i = pool.index.get(dev)
                        if units and i is not None:
                            try:
                                take()
                            except IndexError:  # held by another thread (maplock)
                                wait()
                            try:
                                free = pool.free
                                old = free[i]
                                new = old + units
                                if new <= pool.gate[i]:  # -1 when unavailable
                                    buckets, bit = pool.buckets, pool.bits[i]
                                    free[i] = new
                                    pool.total_free += units
                                    if old:
                                        rest = buckets[old] ^ bit
                                        if rest:
                                            buckets[old] = rest
                                        else:
                                            del buckets[old]
                                    buckets[new] = buckets.get(new, 0) | bit
                                    return
                            finally:
                                put(True)
                                if waiters:
                                    wake()
                    elif _free_several(pool, per_device, m._lock):
                        return
                except (TypeError, AttributeError):  # unhashable amounts, not a mapping
                    pass
        general(alloc)

    return free_


def _free_several(
    pool: SlotPool,
    per_device: Mapping[DeviceId, Decimal],
    lock: MapLock,
) -> bool:
    """Free a grant on several devices of ``pool`` if it is plainly valid; say whether it was.

    W1/W2 and W3 EVENLY grants split over devices. Anything unusual is left to the general path.
    """
    index, units_of, gate, free = pool.index, pool.units_of, pool.gate, pool.free
    grants: Grants = []
    lock.acquire()
    try:
        # validate every entry first (a refused free changes nothing), in one pass
        for dev, raw in per_device.items():
            units = units_of.get(str(raw)) if raw.__class__ is Decimal else None
            i = index.get(dev)
            # the room test fails always for an unavailable device (its gate is -1)
            if not units or i is None or units > gate[i] - free[i]:
                return False
            grants.append((i, units))
        # SlotPool.shift(grants, -1), inline
        buckets, bits = pool.buckets, pool.bits
        total = 0
        for i, units in grants:
            old = free[i]
            free[i] = new = old + units
            total += units
            bit = bits[i]
            if old:
                rest = buckets[old] ^ bit
                if rest:
                    buckets[old] = rest
                else:
                    del buckets[old]
            buckets[new] = buckets.get(new, 0) | bit
        pool.total_free += total
        return True
    finally:
        lock.release()
