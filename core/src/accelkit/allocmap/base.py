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
from accelkit.allocmap.pool import SlotPool
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

    ``device_slots`` gives every device's slot and capacity; ``device_mask`` (default: every
    device) restricts the map to the devices it may allocate, apply or free; requesting slots
    matched by different ``exclusive_slot_types`` patterns in one call is refused. All methods
    are thread-safe (one lock per map) and atomic: a call that raises changed nothing.
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
        self._exclusive: dict[SlotName, frozenset[str]] = {}
        for name in self._pools:
            if matched := frozenset(p for p in self._patterns if fnmatchcase(name, p)):
                self._exclusive[name] = matched

    # -- conversions between Decimal amounts and a pool's integer units -------------------

    @abstractmethod
    def _capacity_units(self, slot_type: SlotType, amount: Decimal) -> int:
        """Whole units a device of ``amount`` capacity contributes."""

    @abstractmethod
    def _units(self, pool: SlotPool, amount: Decimal) -> int:
        """Units of a positive ``amount``; raise when the amount cannot be expressed in them."""

    @abstractmethod
    def _amount(self, pool: SlotPool, units: int) -> Decimal:
        """The Decimal amount of ``units``."""

    @abstractmethod
    def _place(
        self, pool: SlotPool, units: int, hint: AffinityHint | None, requested: Decimal
    ) -> Grants:
        """Grants for a request the pool has enough free units for (nothing is changed)."""

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
        with self._lock:
            plan: list[tuple[SlotPool, Grants, Decimal, int]] = []
            for slot, raw in slots.items():
                requested = raw
                if type(requested) is not Decimal or not requested.is_finite():
                    requested = self._coerce(raw, slot, context_tag)
                if requested <= 0:
                    if requested == 0:
                        continue
                    msg = f"{_tag(context_tag)}slot {slot!r}: negative request {requested}"
                    raise InvalidResourceArgument(msg)
                pool = self._pools.get(slot)
                if pool is None:
                    msg = f"{_tag(context_tag)}unknown slot {slot!r}"
                    raise InvalidResourceArgument(msg)
                units = self._units(pool, requested)
                if pool.unique and units != 1:
                    msg = f"{_tag(context_tag)}UNIQUE slot {slot!r}: request 1, not {requested}"
                    raise InvalidResourceArgument(msg)
                if units > pool.total_free:
                    free = self._amount(pool, pool.total_free)
                    msg = (
                        f"{_tag(context_tag)}slot {slot!r}: requested {format_amount(requested)}, "
                        f"only {format_amount(free)} allocatable"
                    )
                    raise InsufficientResource(
                        msg, slot=slot, requested=requested, allocatable=free
                    )
                plan.append(
                    (pool, self._place(pool, units, affinity_hint, requested), requested, units)
                )
            result: dict[SlotName, dict[DeviceId, Decimal]] = {}
            for pool, grants, requested, units in plan:
                ids = pool.ids
                granted: dict[DeviceId, Decimal] = {}
                for i, u in grants:
                    pool.take(i, u)
                    # A whole request on one device keeps the caller's own Decimal.
                    granted[ids[i]] = requested if u == units else self._amount(pool, u)
                result[pool.name] = granted
            return result

    def apply_allocation(self, alloc: DeviceAllocation) -> None:
        """Mark ``alloc`` as allocated, e.g. to restore allocations after a restart.

        Raises :class:`~accelkit.errors.InvalidResourceArgument` (changing nothing) for an
        unknown device or slot, a device outside the mask or of another slot, a malformed
        amount, or an amount beyond the device's free capacity.
        """
        with self._lock:
            for pool, i, units in self._resolve(alloc, "apply"):
                pool.take(i, units)

    def free(self, alloc: DeviceAllocation) -> None:
        """Release ``alloc``; raise :class:`~accelkit.errors.InvalidResourceArgument` (changing
        nothing) for the cases :meth:`apply_allocation` refuses and for freeing more than is
        allocated on a device."""
        with self._lock:
            for pool, i, units in self._resolve(alloc, "free"):
                pool.take(i, -units)

    # -- validation -------------------------------------------------------------------------

    def _resolve(self, alloc: DeviceAllocation, op: str) -> list[tuple[SlotPool, int, int]]:
        changes: list[tuple[SlotPool, int, int]] = []
        for slot, per_device in alloc.items():
            pool = self._pools.get(slot)
            if pool is None:
                msg = f"cannot {op}: unknown slot {slot!r}"
                raise InvalidResourceArgument(msg)
            index = pool.index
            for dev, raw in per_device.items():
                i = index.get(dev)
                if i is None:
                    raise InvalidResourceArgument(self._why_not_in(pool, dev, op))
                amount = raw
                if type(amount) is not Decimal or not amount.is_finite():
                    amount = self._coerce(raw, slot, None)
                if amount <= 0:
                    if amount == 0:
                        continue
                    msg = f"cannot {op}: negative amount {amount} of {slot!r} on {dev!r}"
                    raise InvalidResourceArgument(msg)
                units = self._units(pool, amount)
                room = pool.free[i] if op == "apply" else pool.cap[i] - pool.free[i]
                if units > room:
                    have = format_amount(self._amount(pool, room))
                    what = "free" if op == "apply" else "allocated"
                    msg = (
                        f"cannot {op} {format_amount(amount)} of {slot!r} on {dev!r}: "
                        f"only {have} {what}"
                    )
                    raise InvalidResourceArgument(msg)
                changes.append((pool, i, units))
        return changes

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
