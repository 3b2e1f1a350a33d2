"""The contract and shared machinery of every alloc map."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from decimal import Decimal
from fnmatch import fnmatchcase
from typing import Any

from accelkit.allocmap.affinity import AffinityHint
from accelkit.allocmap.placement import Grants
from accelkit.allocmap.pool import CACHE_LIMIT, SlotPool
from accelkit.allocmap.strategy import AllocationStrategy
from accelkit.errors import (
    InsufficientResource,
    InvalidResourceArgument,
    InvalidResourceCombination,
)
from accelkit.types import (
    DeviceAllocation,
    DeviceId,
    DeviceSlotInfo,
    SlotName,
    SlotType,
    format_amount,
    to_decimal,
)

_ZERO = Decimal(0)
_NO_POOL = SlotPool(SlotName(""), SlotType.COUNT, (), (), ())


def _as_strings(value: Iterable[str] | str, what: str) -> tuple[str, ...]:
    # A bare string is one item, not an iterable of one-letter items.
    items = (value,) if isinstance(value, str) else tuple(value)
    for item in items:
        if not isinstance(item, str):
            msg = f"{what} must be strings, got {item!r}"
            raise InvalidResourceArgument(msg)
    return items


class AbstractAllocMap(ABC):
    """Tracks what is allocated on a set of devices, one slot per device.

    ``device_slots`` gives every device's slot and capacity. ``device_mask`` (default: every
    device; unknown devices raise :class:`~accelkit.errors.InvalidResourceArgument`) restricts
    the map to the devices it may allocate, apply or free; devices outside it appear in no
    view. ``exclusive_slot_types`` are :func:`fnmatch.fnmatchcase` patterns; in one
    ``allocate`` call, every requested (non-zero) slot that matches any pattern must match one
    pattern common to all of them, else
    :class:`~accelkit.errors.InvalidResourceCombination` is raised. So with
    ``["cuda.device", "cuda.mig-*"]``, two MIG profiles combine, ``cpu`` combines with
    anything, and ``cuda.device`` never combines with a MIG profile.

    Ties between equally suitable devices go to the device listed first in ``device_slots``.
    Every method is thread-safe (one lock per map, so a map shared by several agents hands out
    each unit once, first come first served) and atomic: a call that raises changed nothing.
    """

    def __init__(
        self,
        device_slots: Mapping[DeviceId, DeviceSlotInfo],
        *,
        device_mask: Iterable[DeviceId] | None = None,
        exclusive_slot_types: Iterable[str] = (),
        strategy: AllocationStrategy = AllocationStrategy.EVENLY,
    ) -> None:
        self._all_slots: dict[DeviceId, DeviceSlotInfo] = dict(device_slots)
        if device_mask is None:
            mask = frozenset(self._all_slots)
        else:
            mask = frozenset(_as_strings(device_mask, "device mask entries"))  # type: ignore[arg-type]
            if unknown := mask - self._all_slots.keys():
                msg = f"device mask names unknown devices: {', '.join(sorted(unknown))}"
                raise InvalidResourceArgument(msg)
        self._mask: frozenset[DeviceId] = mask
        self._strategy = AllocationStrategy(strategy)
        self._patterns = _as_strings(exclusive_slot_types, "exclusive slot types")
        self._lock = threading.Lock()
        self._acquire = self._lock.acquire
        self._release = self._lock.release

        types: dict[SlotName, SlotType] = {}
        members: dict[SlotName, list[DeviceId]] = {}
        for dev, info in self._all_slots.items():
            prev = types.setdefault(info.slot_name, info.slot_type)
            if prev is not info.slot_type:
                msg = f"slot {info.slot_name!r} is both {prev.value} and {info.slot_type.value}"
                raise InvalidResourceArgument(msg)
            ids = members.setdefault(info.slot_name, [])
            if dev in mask:
                ids.append(dev)
        self._pools: dict[SlotName, SlotPool] = {}
        for name, ids in members.items():
            infos = [self._all_slots[d] for d in ids]
            caps = [self._capacity_units(types[name], i.amount) for i in infos]
            nodes = [i.numa_node for i in infos]
            self._pools[name] = SlotPool(name, types[name], ids, caps, nodes)
        caches: dict[str, tuple[dict[Decimal, int], dict[int, Decimal]]] = {}
        for pool in self._pools.values():
            pool.units_of, pool.amount_of = caches.setdefault(self._conversion_kind(pool), ({}, {}))
        self._exclusive: dict[SlotName, frozenset[str]] = {}
        for name in self._pools:
            if matched := frozenset(p for p in self._patterns if fnmatchcase(name, p)):
                self._exclusive[name] = matched

    # -- conversions between Decimal amounts and a pool's integer units -------------------

    @abstractmethod
    def _capacity_units(self, slot_type: SlotType, amount: Decimal) -> int:
        """Whole units a device of ``amount`` capacity contributes."""

    @abstractmethod
    def _convert(self, pool: SlotPool, amount: Decimal) -> int:
        """Units of a positive finite ``amount``; raise when it cannot be expressed in them."""

    @abstractmethod
    def _make_amount(self, pool: SlotPool, units: int) -> Decimal:
        """The Decimal amount of ``units``."""

    @abstractmethod
    def _conversion_kind(self, pool: SlotPool) -> str:
        """Pools of the same kind share one pair of conversion caches."""

    @abstractmethod
    def _place(
        self, pool: SlotPool, units: int, hint: AffinityHint | None, requested: Decimal
    ) -> Grants:
        """Grants for a request the pool has enough free units for (nothing is changed)."""

    def _units(self, pool: SlotPool, amount: Decimal) -> int:
        units = pool.units_of.get(amount)
        if units is None:
            units = self._convert(pool, amount)
            if len(pool.units_of) < CACHE_LIMIT:
                pool.units_of[amount] = units
        return units

    def _amount(self, pool: SlotPool, units: int) -> Decimal:
        amount = pool.amount_of.get(units)
        if amount is None:
            amount = self._make_amount(pool, units) if units else _ZERO
            if len(pool.amount_of) < CACHE_LIMIT:
                pool.amount_of[units] = amount
        return amount

    # -- views ------------------------------------------------------------------------------

    @property
    def device_mask(self) -> frozenset[DeviceId]:
        """The devices this map may allocate, apply and free."""
        return self._mask

    @property
    def device_slots(self) -> Mapping[DeviceId, DeviceSlotInfo]:
        """Slot and capacity of every device inside the mask."""
        return {d: i for d, i in self._all_slots.items() if d in self._mask}

    @property
    def strategy(self) -> AllocationStrategy:
        """The device-level placement strategy."""
        return self._strategy

    @property
    def allocations(self) -> Mapping[SlotName, Mapping[DeviceId, Decimal]]:
        """A snapshot of what is allocated on each device inside the mask, zeros included."""
        with self._lock:
            return {
                name: {
                    dev: self._amount(pool, pool.cap[i] - pool.free[i])
                    if pool.free[i] != pool.cap[i]
                    else _ZERO
                    for i, dev in enumerate(pool.ids)
                }
                for name, pool in self._pools.items()
                if pool.ids
            }

    def capacity(self) -> Mapping[SlotName, Decimal]:
        """Total allocatable capacity per slot over the devices inside the mask.

        A fraction map counts each device's capacity rounded down to the quantum; a UNIQUE
        device counts as 1.
        """
        with self._lock:
            return {n: self._amount(p, p.total_cap) for n, p in self._pools.items() if p.ids}

    def allocatable(self) -> Mapping[SlotName, Decimal]:
        """Free capacity per slot over the devices inside the mask (capacity minus allocated)."""
        with self._lock:
            return {n: self._amount(p, p.total_free) for n, p in self._pools.items() if p.ids}

    # -- operations -------------------------------------------------------------------------

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
        capacity; nothing is allocated then.
        """
        if self._exclusive:
            self._check_exclusive(slots, context_tag)
        # acquire/release in try/finally: measurably cheaper than ``with`` on the hot path.
        self._acquire()
        try:
            if len(slots) == 1:
                # One slot is by far the most common request; a single-device pool (a mem
                # root) needs no placement either. This path is inlined for speed.
                for slot, raw in slots.items():
                    requested = raw
                    try:
                        pool = self._pools[slot]
                        units = pool.units_of[raw] if type(raw) is Decimal else 0
                    except (KeyError, TypeError):
                        units = 0
                    if not units:
                        pool, requested, units = self._check_request(slot, raw, context_tag)
                        if not units:
                            return {}
                    if units > pool.total_free:
                        raise self._insufficient(pool, requested, context_tag)
                    if pool.simple:
                        pool.free[0] -= units
                        pool.total_free -= units
                        return {slot: {pool.ids[0]: requested}}
                    grants = self._place(pool, units, affinity_hint, requested)
                    return {slot: self._commit(pool, grants, requested, units)}
            plan: list[tuple[SlotPool, Grants, Decimal, int]] = []
            for slot, raw in slots.items():
                pool, requested, units = self._request(slot, raw, context_tag)
                if units:
                    grants = self._grants(pool, units, affinity_hint, requested)
                    plan.append((pool, grants, requested, units))
            return {p.name: self._commit(p, g, r, u) for p, g, r, u in plan}
        finally:
            self._release()

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
        self._acquire()
        try:
            if len(alloc) == 1:
                # Fast path, inlined: one valid amount on one device, the common case.
                # Anything unusual falls through to the full validation below.
                for slot, per_device in alloc.items():
                    pool = self._pools.get(slot)
                    if pool is not None and len(per_device) == 1:
                        for dev, raw in per_device.items():
                            i = pool.index.get(dev)
                            if i is None or type(raw) is not Decimal or not raw.is_finite():
                                break
                            units = pool.units_of.get(raw)
                            if units is None or units > pool.cap[i] - pool.free[i]:
                                break
                            if pool.bucketed:
                                pool.shift([(i, units)], -1)
                            else:
                                pool.free[i] += units
                                pool.total_free += units
                            return
            for pool, grants in self._resolve(alloc, freeing=True):
                pool.shift(grants, -1)
        finally:
            self._release()

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
                units = pool.units_of[raw]
                if units > pool.total_free:
                    raise self._insufficient(pool, raw, context_tag)
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
        amount = self._amount
        return {ids[i]: amount(pool, u) for i, u in grants}

    # -- validation -------------------------------------------------------------------------

    def _check_request(
        self, slot: SlotName, raw: Any, context_tag: str | None
    ) -> tuple[SlotPool, Decimal, int]:
        """Validate one requested amount the fast path did not recognise."""
        requested = self._coerce(raw, slot, context_tag)
        if requested <= 0:
            if requested == 0:
                return _NO_POOL, requested, 0
            msg = f"{_tag(context_tag)}slot {slot!r}: negative request {requested}"
            raise InvalidResourceArgument(msg)
        pool = self._pools.get(slot)
        if pool is None:
            msg = f"{_tag(context_tag)}unknown slot {slot!r}"
            raise InvalidResourceArgument(msg)
        try:
            units = self._units(pool, requested)
        except InvalidResourceArgument as exc:
            msg = f"{_tag(context_tag)}{exc}"
            raise type(exc)(msg) from None
        if units > pool.total_free:
            raise self._insufficient(pool, requested, context_tag)
        return pool, requested, units

    def _insufficient(
        self, pool: SlotPool, requested: Decimal, context_tag: str | None
    ) -> InsufficientResource:
        free = self._amount(pool, pool.total_free)
        # Failed allocations are part of normal operation (agents probe for room), so the
        # message is built with str() rather than format_amount() where that is safe.
        want, have = str(requested), str(free)
        if "E" in want or "E" in have:
            want, have = format_amount(requested), format_amount(free)
        msg = (
            f"{f'[{context_tag}] ' if context_tag else ''}slot {pool.name!r}: requested "
            f"{want}, only {have} allocatable"
        )
        return InsufficientResource(msg, slot=pool.name, requested=requested, allocatable=free)

    def _resolve(self, alloc: DeviceAllocation, *, freeing: bool) -> list[tuple[SlotPool, Grants]]:
        """Validate ``alloc`` entirely and return its changes as ``(pool, grants)``."""
        changes: list[tuple[SlotPool, Grants]] = []
        pools = self._pools
        for slot, per_device in alloc.items():
            pool = pools.get(slot)
            if pool is None:
                op = "free" if freeing else "apply"
                msg = f"cannot {op}: unknown slot {slot!r}"
                raise InvalidResourceArgument(msg)
            index = pool.index
            units_of = pool.units_of
            cap = pool.cap
            free = pool.free
            grants: Grants = []
            for dev, raw in per_device.items():
                try:
                    if type(raw) is not Decimal:
                        raise TypeError
                    i = index[dev]
                    units = units_of[raw]
                except (KeyError, TypeError):
                    checked = self._check_entry(pool, dev, raw, freeing)
                    if checked is None:
                        continue
                    i, units = checked
                room = cap[i] - free[i] if freeing else free[i]
                if units > room:
                    raise self._over(pool, dev, units, room, freeing)
                grants.append((i, units))
            changes.append((pool, grants))
        return changes

    def _check_entry(
        self, pool: SlotPool, dev: DeviceId, raw: Any, freeing: bool
    ) -> tuple[int, int] | None:
        op = "free" if freeing else "apply"
        i = pool.index.get(dev)
        if i is None:
            raise InvalidResourceArgument(self._why_not_in(pool, dev, op))
        amount = self._coerce(raw, pool.name, None)
        if amount <= 0:
            if amount == 0:
                return None
            msg = f"cannot {op}: negative amount {amount} of {pool.name!r} on {dev!r}"
            raise InvalidResourceArgument(msg)
        try:
            return i, self._units(pool, amount)
        except InvalidResourceArgument as exc:
            msg = f"cannot {op} on {dev!r}: {exc}"
            raise type(exc)(msg) from None

    def _over(
        self, pool: SlotPool, dev: DeviceId, units: int, room: int, freeing: bool
    ) -> InvalidResourceArgument:
        op, what = ("free", "allocated") if freeing else ("apply", "free")
        msg = (
            f"cannot {op} {format_amount(self._amount(pool, units))} of {pool.name!r} on "
            f"{dev!r}: only {format_amount(self._amount(pool, room))} {what}"
        )
        return InvalidResourceArgument(msg)

    def _why_not_in(self, pool: SlotPool, dev: DeviceId, op: str) -> str:
        info = self._all_slots.get(dev)
        if info is None:
            return f"cannot {op}: unknown device {dev!r}"
        if dev not in self._mask:
            return f"cannot {op}: device {dev!r} is outside the device mask"
        return f"cannot {op}: device {dev!r} provides slot {info.slot_name!r}, not {pool.name!r}"

    def _coerce(self, value: Any, slot: str, context_tag: str | None) -> Decimal:
        try:
            return to_decimal(value)
        except (TypeError, ValueError) as exc:
            msg = f"{_tag(context_tag)}slot {slot!r}: {exc}"
            raise InvalidResourceArgument(msg) from exc

    def _check_exclusive(self, slots: Mapping[SlotName, Any], context_tag: str | None) -> None:
        # Rule: the requested slots that match any exclusive pattern must all match one common
        # pattern; slots matching no pattern combine with anything.
        common: frozenset[str] | None = None
        involved: list[str] = []
        for slot, requested in slots.items():
            matched = self._exclusive.get(slot)
            if matched is None or (isinstance(requested, Decimal | int) and requested == 0):
                continue
            involved.append(slot)
            common = matched if common is None else common & matched
            if not common:
                msg = (
                    f"{_tag(context_tag)}slots {', '.join(map(repr, involved))} belong to "
                    "mutually exclusive slot types and cannot be requested together"
                )
                raise InvalidResourceCombination(msg)


def _tag(context_tag: str | None) -> str:
    return f"[{context_tag}] " if context_tag else ""
