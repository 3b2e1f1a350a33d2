"""allocate, apply_allocation and free: the operations every alloc map shares.

These are the general, fully validating paths; the common single-slot calls take the fast
path of :mod:`accelkit.allocmap.fastpath`, which hands over to these whatever it does not
handle.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from accelkit.allocmap.affinity import AffinityHint
from accelkit.allocmap.checks import check_exclusive, coerce, insufficient, over, tag, why_not_in
from accelkit.allocmap.maplock import MapLock
from accelkit.allocmap.placement import Grants
from accelkit.allocmap.pool import CACHE_LIMIT, SlotPool
from accelkit.errors import InsufficientResource, InvalidResourceArgument, NotMultipleOfQuantum
from accelkit.types import DeviceAllocation, DeviceId, DeviceSlotInfo, SlotName, SlotType

_ZERO = Decimal(0)
_NO_POOL = SlotPool(SlotName(""), SlotType.COUNT, (), (), ())


class MapOperations(ABC):
    """Allocation, restore and release over the pools an alloc map builds."""

    # Set up by AbstractAllocMap.__init__.
    _all_slots: dict[DeviceId, DeviceSlotInfo]
    _mask: frozenset[DeviceId]
    _pools: dict[SlotName, SlotPool]
    _exclusive: dict[SlotName, frozenset[str]]
    _lock: MapLock

    @abstractmethod
    def _convert(self, pool: SlotPool, amount: Decimal) -> int:
        """Units of a positive finite ``amount``; raise when it cannot be expressed in them."""

    @abstractmethod
    def _make_amount(self, pool: SlotPool, units: int) -> Decimal:
        """The Decimal amount of ``units``."""

    @abstractmethod
    def _conversion_kind(self, pool: SlotPool) -> str:
        """Pools of the same kind share one pair of conversion caches."""

    def _fills_most_free(self) -> bool:
        """Whether a request without a hint takes the most free device, or the most free
        devices in turn when none holds it (FILL; the fast path then places it itself)."""
        return False

    @abstractmethod
    def _place(
        self, pool: SlotPool, units: int, hint: AffinityHint | None, requested: Decimal
    ) -> Grants:
        """Grants for a request the pool has enough free units for (nothing is changed)."""

    def _units(self, pool: SlotPool, amount: Decimal) -> int:
        # Keyed by str(amount) (see SlotPool.units_of); a subclass may print itself otherwise.
        key = str(amount) if type(amount) is Decimal else None
        units = pool.units_of.get(key) if key is not None else None
        if units is None:
            units = self._convert(pool, amount)
            if key is not None and len(pool.units_of) < CACHE_LIMIT:
                pool.units_of[key] = units
        return units

    def _amount(self, pool: SlotPool, units: int) -> Decimal:
        amount = pool.amount_of.get(units)
        if amount is None:
            amount = self._make_amount(pool, units) if units else _ZERO
            if len(pool.amount_of) < CACHE_LIMIT:
                pool.amount_of[units] = amount
        return amount

    def allocate(
        self,
        slots: Mapping[SlotName, Decimal],
        *,
        affinity_hint: AffinityHint | None = None,
        context_tag: str | None = None,
    ) -> DeviceAllocation:
        """Allocate every slot of ``slots`` at once and return the grants.

        Only devices granted more than zero appear in the result. Zero requests are skipped.
        ``context_tag`` names the requester in error messages. Raises
        :class:`~accelkit.errors.InvalidResourceArgument` for malformed requests,
        :class:`~accelkit.errors.InvalidResourceCombination` for exclusive slots requested
        together and :class:`~accelkit.errors.InsufficientResource` when a slot lacks free
        capacity, a slot no device of the map offers included (allocatable 0, "no device
        offers slot 'y'"); nothing is allocated then. The result is read-only: maps may hand
        out one shared grant for equal grants (:mod:`accelkit.allocmap.onedevice`).
        """
        # The common single-slot case never gets here: the fast path of
        # :mod:`accelkit.allocmap.fastpath` handles it and hands over only what it does not.
        _check_mapping(slots, "allocate", "slot names to amounts")
        if self._exclusive and len(slots) > 1:
            check_exclusive(self._exclusive, slots, context_tag)
        with self._lock:
            plan: list[tuple[SlotPool, Grants, Decimal, int]] = []
            for slot, raw in slots.items():
                pool, requested, units = self._request(slot, raw, context_tag)
                if units:
                    grants = self._grants(pool, units, affinity_hint, requested)
                    plan.append((pool, grants, requested, units))
            return {p.name: self._commit(p, g, r, u) for p, g, r, u in plan}

    def apply_allocation(self, alloc: DeviceAllocation) -> None:
        """Mark ``alloc`` as allocated, e.g. to restore allocations after a restart.

        Raises :class:`~accelkit.errors.InvalidResourceArgument` (changing nothing) for an
        unknown device or slot, a device outside the mask or of another slot, a malformed
        amount, or an amount beyond the device's free capacity.
        """
        with self._lock:
            for pool, grants in self._resolve(alloc, freeing=False):
                pool.take(grants)

    def free(self, alloc: DeviceAllocation) -> None:
        """Release ``alloc``, typically a result of :meth:`allocate`.

        Raises :class:`~accelkit.errors.InvalidResourceArgument` (changing nothing) for the
        cases :meth:`apply_allocation` refuses and for freeing more than is allocated on a
        device.
        """
        with self._lock:
            for pool, grants in self._resolve(alloc, freeing=True):
                pool.change(grants, -1)

    # -- the steps of allocate ----------------------------------------------------------------

    def _request(
        self, slot: SlotName, raw: Any, context_tag: str | None
    ) -> tuple[SlotPool, Decimal, int]:
        """Pool, amount and units of one requested slot; units are 0 for a zero request."""
        # Fast path: a known slot and a Decimal amount seen before. The cache holds only
        # validated positive amounts; anything else (ints, strings, floats, NaN, zero,
        # negative, unknown slots) takes the slow path.
        try:
            if type(raw) is Decimal:
                pool = self._pools[slot]
                units = pool.units_of[str(raw)]
                if units > pool.total_free:
                    raise insufficient(pool, raw, self._amount(pool, pool.total_free), context_tag)
                return pool, raw, units
        except (KeyError, TypeError):
            pass
        return self._check_request(slot, raw, context_tag)

    def _grants(
        self, pool: SlotPool, units: int, hint: AffinityHint | None, requested: Decimal
    ) -> Grants:
        if pool.bucketed or pool.unique:
            return self._place(pool, units, hint, requested)
        return [(0, units)]

    def _commit(
        self, pool: SlotPool, grants: Grants, requested: Decimal, units: int
    ) -> dict[DeviceId, Decimal]:
        pool.shift(grants, 1)
        ids = pool.ids
        if len(grants) == 1:
            # A whole request on one device keeps the caller's own Decimal.
            return {ids[grants[0][0]]: requested}
        cached = pool.amount_of.get
        amount = self._amount
        return {ids[i]: cached(u) or amount(pool, u) for i, u in grants}

    def _check_request(
        self, slot: SlotName, raw: Any, context_tag: str | None
    ) -> tuple[SlotPool, Decimal, int]:
        """Validate one requested amount the fast path did not recognise."""
        requested = coerce(raw, slot, context_tag)
        if requested <= 0:
            if requested == 0:
                return _NO_POOL, requested, 0
            msg = f"{tag(context_tag)}slot {slot!r}: negative request {requested}"
            raise InvalidResourceArgument(msg)
        pool = self._pools.get(slot)
        if pool is None:
            raise _offered_by_none(slot, requested, context_tag)
        try:
            units = self._units(pool, requested)
        except (InvalidResourceArgument, NotMultipleOfQuantum) as exc:
            msg = f"{tag(context_tag)}{exc}"
            raise type(exc)(msg) from None
        if not pool.ids:  # every device of the slot is outside the mask
            raise _offered_by_none(slot, requested, context_tag)
        if units > pool.total_free:
            raise insufficient(pool, requested, self._amount(pool, pool.total_free), context_tag)
        return pool, requested, units

    def _resolve(self, alloc: DeviceAllocation, *, freeing: bool) -> list[tuple[SlotPool, Grants]]:
        """Validate ``alloc`` entirely and return its changes as ``(pool, grants)``."""
        changes: list[tuple[SlotPool, Grants]] = []
        pools = self._pools
        _check_mapping(alloc, "free" if freeing else "apply", "slot names to grants")
        for slot, per_device in alloc.items():
            pool = pools.get(slot)
            if pool is None:
                op = "free" if freeing else "apply"
                msg = f"cannot {op}: unknown slot {slot!r}"
                raise InvalidResourceArgument(msg)
            if per_device.__class__ is not dict and not isinstance(per_device, Mapping):
                op = "free" if freeing else "apply"
                msg = f"cannot {op}: {slot!r} must map device ids to amounts, not {per_device!r}"
                raise InvalidResourceArgument(msg)
            index = pool.index
            units_of = pool.units_of
            cap = pool.cap
            free = pool.free
            hidden = pool.hidden  # unavailable devices keep their free units here
            grants: Grants = []
            for dev, raw in per_device.items():
                try:
                    if type(raw) is not Decimal:
                        raise TypeError
                    i = index[dev]
                    units = units_of[str(raw)]
                except (KeyError, TypeError):
                    checked = self._check_entry(pool, dev, raw, freeing)
                    if checked is None:
                        continue
                    i, units = checked
                left = hidden[i] if hidden and i in hidden else free[i]
                room = cap[i] - left if freeing else left
                if units > room:
                    # the amount as given: an absurd one is held as one unit past capacity
                    given = coerce(raw, pool.name, None)
                    raise over(pool, dev, given, self._amount(pool, room), freeing)
                grants.append((i, units))
            changes.append((pool, grants))
        return changes

    def _check_entry(
        self, pool: SlotPool, dev: DeviceId, raw: Any, freeing: bool
    ) -> tuple[int, int] | None:
        op = "free" if freeing else "apply"
        i = pool.index.get(dev)
        if i is None:
            raise InvalidResourceArgument(why_not_in(self._all_slots, self._mask, pool, dev, op))
        amount = coerce(raw, pool.name, None)
        if amount <= 0:
            if amount == 0:
                return None
            msg = f"cannot {op}: negative amount {amount} of {pool.name!r} on {dev!r}"
            raise InvalidResourceArgument(msg)
        try:
            return i, self._units(pool, amount)
        except (InvalidResourceArgument, NotMultipleOfQuantum) as exc:
            # an amount off the quantum is a malformed allocation here, not a request
            msg = f"cannot {op} on {dev!r}: {exc}"
            raise InvalidResourceArgument(msg) from None


def _offered_by_none(
    slot: SlotName, requested: Decimal, context_tag: str | None
) -> InsufficientResource:
    # DESIGN §5: a slot no device of the map offers is a lack of capacity (none at all).
    msg = f"{tag(context_tag)}no device offers slot {slot!r}"
    return InsufficientResource(
        msg, slot=slot, requested=requested, allocatable=_ZERO, context_tag=context_tag
    )


def _check_mapping(value: object, op: str, of: str) -> None:
    """Requests and allocations are mappings: anything else is refused, naming its type."""
    # a dict (nearly always) without the ABC's check: a fifth of applying a small allocation
    if value.__class__ is not dict and not isinstance(value, Mapping):
        msg = f"cannot {op}: expected a mapping of {of}, not {type(value).__name__} {value!r:.80}"
        raise InvalidResourceArgument(msg)
