"""The fast path of FILL maps of one slot over a few devices (:class:`ScannedPool`): W3 FILL.

FILL takes the most free device, or the most free devices in turn when none holds the
request. Over a few devices sorting ``free`` and ``free.index`` find it for less than keeping
free-amount buckets up to date costs on every allocate and free, so the pool keeps none and
an allocate or free changes two numbers per device. Placing and taking is FILL's one rule
written out for that list (:data:`accelkit.allocmap.fillrule.FREE_LIST`): the free amounts
are sorted once per allocate (sorting a few costs what one ``max`` does), and a split takes
them most first, finding each device with ``free.index``: W3 FILL splits 2,928 of its 7,193
grants, three devices each on average. FILL and requests with a hint are functions of their
own, which keeps the frame of ``allocate`` small: its locals are set up on every call and
copied once more when a refusal unwinds it (5,625 of W3's 12,818 calls). Each map gets its own
copies of ``allocate`` and ``free_``, which read the map's state as their globals
(:mod:`accelkit.allocmap.namespaced`; the module's values of those names are placeholders no
call reads). Everything
unusual goes to the general, validating methods, exactly as in
:mod:`accelkit.allocmap.fastpath`, whose rules (one slot, a Decimal amount converted before,
both paths under the map's lock) hold here too. Grants are those of
:mod:`accelkit.allocmap.shared`: one read-only grant per device and amount, and splits noted
until they are freed, so a free of either is one lookup by ``id``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any, cast

from accelkit.allocmap import fillrule, namespaced
from accelkit.allocmap.affinity import AffinityHint
from accelkit.allocmap.maplock import MapLock
from accelkit.allocmap.operations import MapOperations
from accelkit.allocmap.pool import ScannedPool
from accelkit.allocmap.shared import SharedGrants
from accelkit.errors import InsufficientResource, refusal
from accelkit.types import DeviceAllocation, SlotName

# -- the names allocate and free_ read from their globals: placeholders here, a map's own in
# -- the namespace install() gives its copies
_PLACEHOLDER_LOCK = MapLock()
slot = SlotName("")
pool = cast("ScannedPool", None)
units_of: dict[str, int] = {}
amount_of: dict[int, Decimal] = {}
free: list[int] = []
gate: list[int] = []
#: id(one-device grant) -> (device index, units), and id(split) -> (split, taken, units)
issued: dict[int, tuple[int, int]] = {}
splits: dict[int, tuple[DeviceAllocation, dict[int, int], int]] = {}
lock = _PLACEHOLDER_LOCK
take, put, wait, wake, waiters = (
    _PLACEHOLDER_LOCK.take,
    _PLACEHOLDER_LOCK.put,
    _PLACEHOLDER_LOCK.wait,
    _PLACEHOLDER_LOCK.wake,
    _PLACEHOLDER_LOCK.waiters,
)
amount: Callable[[ScannedPool, int], Decimal] = cast("Any", None)
fill: Callable[[int], DeviceAllocation] = cast("Any", None)
hinted: Callable[[Mapping[SlotName, Decimal], int, AffinityHint, str | None], DeviceAllocation] = (
    cast("Any", None)
)
adopt: Callable[[DeviceAllocation], DeviceAllocation] = cast("Any", None)
general_allocate: Callable[..., DeviceAllocation] = cast("Any", None)
general_free: Callable[[DeviceAllocation], None] = cast("Any", None)


def install(m: MapOperations, scanned: ScannedPool) -> None:
    """Give ``m``, a map of the one slot of ``scanned``, the fast ``allocate`` and ``free``."""
    shared = SharedGrants(scanned, m._amount)
    values = {
        "slot": scanned.name,
        "pool": scanned,
        "units_of": scanned.units_of,
        "amount_of": scanned.amount_of,
        "free": scanned.free,
        "gate": scanned.gate,
        "issued": shared.issued,
        "splits": shared.splits,
        "lock": m._lock,
        "take": m._lock.take,
        "put": m._lock.put,
        "wait": m._lock.wait,
        "wake": m._lock.wake,
        "waiters": m._lock.waiters,
        "amount": m._amount,
        "fill": fillrule.scanning_shared(scanned, shared, m._amount),
        "hinted": _hinted(m, scanned, shared, m.allocate),
        "adopt": shared.adopt,
        "general_allocate": m.allocate,
        "general_free": m.free,
    }
    space = namespaced.copies(globals(), ("allocate", "free_"), values)
    space["allocate"].__doc__ = m.allocate.__doc__
    space["free_"].__doc__ = m.free.__doc__
    vars(m).update(allocate=space["allocate"], free=space["free_"])


def allocate(
    slots: Mapping[SlotName, Decimal],
    *,
    affinity_hint: AffinityHint | None = None,
    context_tag: str | None = None,
) -> DeviceAllocation:
    """The fast ``allocate`` (a map's copy of it: see the module docstring)."""
    try:
        raw = slots[slot]  # one lookup, and one conversion of an amount seen before
        units = units_of[str(raw)] if raw.__class__ is Decimal and len(slots) == 1 else 0
    except (KeyError, TypeError):  # not this slot, not a mapping, or a new amount
        units = 0
    if units:
        left = pool.total_free
        if units > left and not pool.hidden:
            # refused on a snapshot, as in fastpath's closures
            allocatable = amount_of.get(left) or amount(pool, left)
            raise refusal(InsufficientResource, slot, raw, allocatable, context_tag)
        if affinity_hint is not None:
            return hinted(slots, units, affinity_hint, context_tag)
        try:
            take()
        except IndexError:  # held by another thread (maplock)
            wait()
        try:
            if units <= pool.total_free:
                return fill(units)
        finally:
            put(True)
            if waiters:
                wake()
        # another thread took the room since the snapshot: the general path says so
    return adopt(general_allocate(slots, affinity_hint=affinity_hint, context_tag=context_tag))


def _hinted(
    m: MapOperations,
    pool: ScannedPool,
    shared: SharedGrants,
    general: Callable[..., DeviceAllocation],
) -> Callable[[Mapping[SlotName, Decimal], int, AffinityHint, str | None], DeviceAllocation]:
    """Requests with an affinity hint: placed by the map's general placement, under the lock."""
    slot, amount_of, ids, by_device, make = (
        pool.name,
        pool.amount_of,
        pool.ids,
        shared.by_device,
        shared.make,
    )
    lock, amount, place = m._lock, m._amount, m._place

    def hinted(
        slots: Mapping[SlotName, Decimal], units: int, hint: AffinityHint, context_tag: str | None
    ) -> DeviceAllocation:
        raw = slots[slot]
        with lock:
            if units <= pool.total_free:
                grants = place(pool, units, hint, raw)
                pool.shift(grants, 1)
                if len(grants) == 1:
                    i = grants[0][0]
                    return by_device[i].get(units) or make(i, units)
                return {slot: {ids[i]: amount_of.get(u) or amount(pool, u) for i, u in grants}}
        # another thread took the room since the snapshot: the general path says so
        return shared.adopt(general(slots, affinity_hint=hint, context_tag=context_tag))

    return hinted


def free_(alloc: DeviceAllocation) -> None:  # noqa: PLR0912 - one frame for the hot path
    """The fast ``free`` (a map's copy of it: see the module docstring)."""
    hit = issued.get(key := id(alloc))
    if hit is not None:  # a shared grant of this map: its device and units are known
        i, units = hit
        try:
            take()
        except IndexError:  # held by another thread (maplock)
            wait()
        try:
            new = free[i] + units
            if new <= gate[i]:  # -1 when unavailable
                free[i] = new
                pool.total_free += units
                return
        finally:
            put(True)
            if waiters:
                wake()
    elif (split := splits.pop(key, None)) is not None:  # a split this map handed out
        _, taken, total = split
        try:
            take()
        except IndexError:  # held by another thread (maplock)
            wait()
        try:
            for i, units in taken.items():  # each device in turn, undone if one has no room
                new = free[i] + units
                if new > gate[i]:  # a refused free changes nothing
                    for j, back in taken.items():
                        if j == i:
                            break
                        free[j] -= back
                    break
                free[i] = new
            else:
                pool.total_free += total
                return
        finally:
            put(True)
            if waiters:
                wake()
    # grants built elsewhere (restored from a ledger, copied), past the tables' bound, or
    # refused: checked in full
    general_free(alloc)
