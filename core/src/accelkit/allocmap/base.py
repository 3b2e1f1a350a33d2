"""The contract and shared state of every alloc map."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable, Mapping
from decimal import Decimal
from fnmatch import fnmatchcase

from accelkit.allocmap import fastpath
from accelkit.allocmap.checks import as_strings, slot_infos, strategy_of
from accelkit.allocmap.kinds import declared_specs, slot_quanta, whole_units
from accelkit.allocmap.maplock import MapLock
from accelkit.allocmap.operations import MapOperations
from accelkit.allocmap.placement import Grants
from accelkit.allocmap.pool import SlotPool, new_pool
from accelkit.allocmap.strategy import AllocationStrategy
from accelkit.errors import InvalidResourceArgument
from accelkit.types import DeviceId, DeviceSlotInfo, SlotName, SlotSpec, SlotType


class AbstractAllocMap(MapOperations):
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

    ``slot_specs`` (a plugin's :meth:`configurable_slots`) give each slot its kind: a *whole*
    slot is granted in whole units only, each unit to one holder, and a request for a fraction
    of it raises :class:`~accelkit.errors.InvalidResourceArgument`; a *divisible* slot is
    granted in multiples of its quantum. Every slot keeps its own kind whatever the map's
    other slots are. A slot no spec declares gets :func:`~accelkit.types.derived_divisible`'s
    kind (:attr:`whole_slots`, :attr:`divisible_slots`).

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
        slot_specs: Iterable[SlotSpec] = (),
    ) -> None:
        self._all_slots: dict[DeviceId, DeviceSlotInfo] = slot_infos(device_slots)
        if device_mask is None:
            mask = frozenset(self._all_slots)
        else:
            mask = frozenset(as_strings(device_mask, "device mask entries"))  # type: ignore[arg-type]
            if unknown := mask - self._all_slots.keys():
                msg = f"device mask names unknown devices: {', '.join(sorted(unknown))}"
                raise InvalidResourceArgument(msg)
        self._mask: frozenset[DeviceId] = mask
        self._unavailable: frozenset[DeviceId] = frozenset()
        self._strategy = strategy_of(strategy)
        self._patterns = as_strings(exclusive_slot_types, "exclusive slot types")
        self._lock = MapLock()

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
        self._quanta = slot_quanta(
            types,
            declared_specs(slot_specs),
            fractional=self._divides_devices,
            unit=self._divisible_unit(),
        )
        self._pools: dict[SlotName, SlotPool] = {}
        # FILL maps of one slot find the most free of a few devices by scanning (the fast
        # paths of maps of several slots work on buckets)
        scan = len(members) == 1 and self._fills_most_free()
        for name, ids in members.items():
            infos = [self._all_slots[d] for d in ids]
            whole = name not in self._quanta
            units = whole_units if whole else self._capacity_units
            caps = [units(types[name], i.amount) for i in infos]
            nodes = [i.numa_node for i in infos]
            self._pools[name] = new_pool(
                name, types[name], ids, caps, nodes, scan=scan, whole=whole
            )
        caches: dict[str, tuple[dict[str, int], dict[int, Decimal]]] = {}
        for pool in self._pools.values():
            pool.units_of, pool.amount_of = caches.setdefault(self._conversion_kind(pool), ({}, {}))
        self._exclusive: dict[SlotName, frozenset[str]] = {}
        for name in self._pools:
            if matched := frozenset(p for p in self._patterns if fnmatchcase(name, p)):
                self._exclusive[name] = matched
        fastpath.install(self, self._quick_placer())

    # -- conversions between Decimal amounts and a pool's integer units -------------------

    #: whether the map divides devices (a fraction map): what an undeclared COUNT slot is
    _divides_devices: bool = False

    def _divisible_unit(self) -> Decimal:
        """The quantum this map grants divisible slots in."""
        return Decimal(1)

    @abstractmethod
    def _capacity_units(self, slot_type: SlotType, amount: Decimal) -> int:
        """Whole units a device of ``amount`` capacity contributes."""

    @abstractmethod
    def _quick_place(self, pool: SlotPool, units: int, requested: Decimal) -> Grants:
        """Grants for a request without a hint on a pool of several devices, not UNIQUE."""

    def _quick_placer(self) -> fastpath.QuickPlace:
        """What the fast path places hint-less requests with (:meth:`_quick_place`)."""
        return self._quick_place

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
    def whole_slots(self) -> frozenset[SlotName]:
        """The slots of the map's devices granted in whole units only (UNIQUE ones included)."""
        return frozenset(n for n in self._pools if n not in self._quanta)

    @property
    def divisible_slots(self) -> Mapping[SlotName, Decimal]:
        """The slots of the map's devices granted in multiples of a quantum, and the quantum."""
        return dict(self._quanta)

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
                    dev: self._amount(pool, pool.cap[i] - pool.real_free(i))
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
        """Free capacity per slot over the devices inside the mask that take new grants
        (capacity minus allocated, less the free capacity of unavailable devices)."""
        with self._lock:
            return {n: self._amount(p, p.total_free) for n, p in self._pools.items() if p.ids}

    # -- devices that take no new grant (health) ------------------------------------------

    @property
    def unavailable_devices(self) -> frozenset[DeviceId]:
        """The devices of this map that take no new grant (see :meth:`set_unavailable`)."""
        return self._unavailable

    def set_unavailable(self, device_ids: frozenset[DeviceId]) -> None:
        """Make exactly ``device_ids`` take no new grant, and every other device take them again.

        The set replaces the previous one; ids that are not devices of this map (unknown, or
        outside the mask) are ignored. No strategy grants an unavailable device anything, and
        a request only they could serve raises :class:`~accelkit.errors.InsufficientResource`
        naming them; :meth:`free` and :meth:`apply_allocation` of allocations on them still
        work. A device made available again offers its free capacity as it is then, so taking
        devices out and back changes no capacity. :meth:`allocatable` leaves out the free
        capacity of unavailable devices; :meth:`capacity` and :attr:`allocations` do not.
        """
        named = frozenset(DeviceId(d) for d in as_strings(device_ids, "unavailable devices"))
        wanted = named & self._mask
        with self._lock:
            for pool in self._pools.values():
                index = pool.index
                for back in [i for i in pool.hidden if pool.ids[i] not in wanted]:
                    pool.unfence(back)
                for dev in wanted:
                    if (out := index.get(dev)) is not None:
                        pool.fence(out)
            self._unavailable = wanted
