"""The fast path of a map of one slot on one device (a ``mem`` root): W4, all four rows.

Slot and device are known in advance, so nothing needs placing, and every grant of one amount
is the same value. The map therefore hands out **one read-only grant per amount** (a
``frozendict`` of a ``frozendict``: a ``Mapping`` as :data:`~accelkit.types.DeviceAllocation`
promises, a ``dict`` to ``json`` and ``isinstance``), built the first time the amount is granted,
and knows its own grants again by identity when they are freed:

- ``allocate``: one lookup of the Decimal amount (which also proves it valid: only validated
  positive amounts are ever remembered), the lock and a subtraction; no result is built;
- ``free`` of a grant this map handed out: one lookup by ``id`` and an addition under the lock;
  no key, amount or device is looked up, since the map built that grant itself.

A grant carries the map's own form of the amount (never an exponent form a caller may have
written). Everything else (several slots, amounts not granted before, mappings built by a
caller, such as allocations restored from a ledger, more distinct amounts than the bound)
goes to the general, validating methods of :class:`~accelkit.allocmap.operations.MapOperations`,
exactly as in :mod:`accelkit.allocmap.fastpath`, whose rules (a refusal read from a snapshot,
both paths under the map's lock) hold here too.

Each map gets its own copies of the functions below, which read the map's state as their
globals (:mod:`accelkit.allocmap.namespaced`); the module's own values of those names are
placeholders no call reads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any, cast

from frozendict import frozendict

from accelkit.allocmap import namespaced
from accelkit.allocmap.affinity import AffinityHint
from accelkit.allocmap.maplock import MapLock
from accelkit.allocmap.operations import MapOperations
from accelkit.allocmap.pool import CACHE_LIMIT, SlotPool
from accelkit.errors import InsufficientResource, refusal
from accelkit.types import DeviceAllocation, DeviceId, SlotName

# -- the names the fast functions read from their globals: placeholders here, a map's own in
# -- the namespace install() gives its copies
_PLACEHOLDER_LOCK = MapLock()
slot = SlotName("")
dev = DeviceId("")
pool = cast("SlotPool", None)
#: str(amount) -> (its units, its grant): the string is an exact key (equal strings are equal
#: Decimals, and the Decimal's own hash costs three times as much to compute), and the table
#: keeps every grant alive, so an id in ``issued`` names that grant and nothing else
grant_of: dict[str, tuple[int, DeviceAllocation]] = {}
#: id(grant) -> its units
issued: dict[int, int] = {}
free: list[int] = []
gate: list[int] = []
units_of: dict[str, int] = {}
amount_of: dict[int, Decimal] = {}
take, put, wait, wake, waiters = (
    _PLACEHOLDER_LOCK.take,
    _PLACEHOLDER_LOCK.put,
    _PLACEHOLDER_LOCK.wait,
    _PLACEHOLDER_LOCK.wake,
    _PLACEHOLDER_LOCK.waiters,
)
amount: Callable[[SlotPool, int], Decimal] = cast("Any", None)
general_allocate: Callable[..., DeviceAllocation] = cast("Any", None)
general_free: Callable[[DeviceAllocation], None] = cast("Any", None)


def install(m: MapOperations, one: SlotPool) -> None:
    """Give ``m``, a map of the one slot of ``one`` on its one device, the fast paths."""
    lock = m._lock
    values = {
        "slot": one.name,
        "dev": one.ids[0],
        "pool": one,
        "grant_of": {},
        "issued": {},
        "free": one.free,
        "gate": one.gate,
        "units_of": one.units_of,
        "amount_of": one.amount_of,
        "take": lock.take,
        "put": lock.put,
        "wait": lock.wait,
        "wake": lock.wake,
        "waiters": lock.waiters,
        "amount": m._amount,
        "general_allocate": m.allocate,
        "general_free": m.free,
    }
    space = namespaced.copies(globals(), ("remember", "allocate", "free_"), values)
    space["allocate"].__doc__ = m.allocate.__doc__
    space["free_"].__doc__ = m.free.__doc__
    vars(m).update(allocate=space["allocate"], free=space["free_"])


def remember(raw: Decimal, granted: DeviceAllocation) -> DeviceAllocation:
    """The grant to hand out for ``raw`` once the general path granted it as ``granted``."""
    units = units_of.get(str(raw))
    if not units or len(grant_of) >= CACHE_LIMIT:
        return granted
    grant: DeviceAllocation = frozendict({slot: frozendict({dev: amount(pool, units)})})
    if grant != granted:  # not a grant of exactly this amount on the device: leave it be
        return granted
    # one grant per amount, even when two threads get here at once (setdefault is atomic)
    _, kept = grant_of.setdefault(str(raw), (units, grant))
    if kept is grant:
        issued[id(grant)] = units
    return kept


def allocate(
    slots: Mapping[SlotName, Decimal],
    *,
    affinity_hint: AffinityHint | None = None,
    context_tag: str | None = None,
) -> DeviceAllocation:
    """The fast ``allocate`` (a map's copy of it: see the module docstring)."""
    try:
        raw = slots[slot]
    except (KeyError, TypeError):  # no such slot, or no mapping: the general path says so
        return general_allocate(slots, affinity_hint=affinity_hint, context_tag=context_tag)
    try:
        hit = grant_of[str(raw)] if raw.__class__ is Decimal and len(slots) == 1 else None
    except KeyError:  # not granted before
        hit = None
    if hit is not None:
        units, grant = hit
        try:
            take()
        except IndexError:  # held by another thread (maplock)
            wait()
        try:
            left = free[0]
            if units <= left:
                free[0] = left - units  # the pool's total_free too (OneDevicePool)
                return grant
        finally:
            put(True)
            if waiters:
                wake()
        if not pool.hidden:  # with unavailable devices the general path refuses, naming them
            allocatable = amount_of.get(left) or amount(pool, left)
            raise refusal(InsufficientResource, slot, raw, allocatable, context_tag)
    granted = general_allocate(slots, affinity_hint=affinity_hint, context_tag=context_tag)
    if hit is None and raw.__class__ is Decimal and len(slots) == 1:
        return remember(raw, granted)
    return granted


def free_(alloc: DeviceAllocation) -> None:
    """The fast ``free`` (a map's copy of it: see the module docstring)."""
    try:
        units = issued[id(alloc)]  # a grant this map built: the id names it (see grant_of)
    except KeyError:  # one built elsewhere (restored from a ledger, copied): checked in full
        try:
            per_device = alloc[slot]
            raw = per_device[dev]
            one = len(alloc) == 1 and len(per_device) == 1
            units = units_of[str(raw)] if one and raw.__class__ is Decimal else 0
        except (KeyError, TypeError):
            units = 0
    if units:
        try:
            take()
        except IndexError:  # held by another thread (maplock)
            wait()
        try:
            left = free[0] + units
            if left <= gate[0]:  # -1 when unavailable: the general path
                free[0] = left
                return
        finally:
            put(True)
            if waiters:
                wake()
    general_free(alloc)
