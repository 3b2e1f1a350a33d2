"""Read-only grants shared by every grant of one amount on one device, known again on ``free``.

Most grants are one amount on one device, and two grants of the same amount on the same device
are the same value. A map's fast paths hand out one read-only grant (a ``frozendict`` of a
``frozendict``: a ``Mapping`` as :data:`~accelkit.types.DeviceAllocation` promises, a ``dict`` to
``json`` and ``isinstance``) per (device, amount) instead of building two dicts per call, and
know it again by ``id`` when it is freed: the table keeps every grant it made alive, so an id
in it names that grant and nothing else. A free of a grant built elsewhere (restored from a
ledger, copied) misses the table and is checked in full, as before.

Grants over several devices (a split) differ from call to call, so they are not shared: the
map notes each one it hands out with the devices and units it took (``live``) and forgets it
when it is freed. A free of a noted split then needs no conversion or lookup per device, only
the room test every free makes. Grants are read-only (``DeviceAllocation`` is a ``Mapping``):
a grant this map handed out frees what it granted.

The FILL maps of a few devices (:mod:`accelkit.allocmap.fillscan`) note their splits in
``splits`` instead, as ``{device index: units}`` with the units of the whole request, so a free
adds each device's units back and the total once, and take a split's amounts from an
:class:`AmountTable`.

The tables are bounded like the conversion caches (:data:`~accelkit.allocmap.pool.CACHE_LIMIT`):
past the bound, grants are built per call and checked in full on free, as before.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

from frozendict import frozendict

from accelkit.allocmap.pool import CACHE_LIMIT, SlotPool
from accelkit.types import DeviceAllocation


class SharedGrants:
    """The shared one-device grants of one pool."""

    __slots__ = ("_amount", "_ids", "_pool", "_slot", "by_device", "issued", "live", "splits")

    # (the general path's grants are made shared by ``adopt``, so the first grant of an
    # amount is the shared one too)

    def __init__(self, pool: SlotPool, amount: Callable[[SlotPool, int], Decimal]) -> None:
        self._slot = pool.name
        self._ids = pool.ids
        self._pool = pool
        self._amount = amount
        #: per device index: units -> its grant (read by the fast paths)
        self.by_device: list[dict[int, DeviceAllocation]] = [{} for _ in pool.ids]
        #: id(grant) -> (device index, units) of every grant in ``by_device``
        self.issued: dict[int, tuple[int, int]] = {}
        #: id(split grant) -> (the grant, its (device index, units)) until it is freed; the
        #: entry keeps the grant alive, so the id names it while it is here
        self.live: dict[int, tuple[DeviceAllocation, list[tuple[int, int]]]] = {}
        #: id(split grant) -> (the grant, {device index: units}, the units of the request),
        #: as ``live`` but for the FILL maps of a few devices
        self.splits: dict[int, tuple[DeviceAllocation, dict[int, int], int]] = {}

    def adopt(self, granted: DeviceAllocation) -> DeviceAllocation:
        """``granted`` (from the general path), or the shared grant equal to it when it is one
        amount on one device of this pool."""
        if len(granted) != 1:
            return granted
        per_device = granted.get(self._slot)
        if per_device is None or len(per_device) != 1:
            return granted
        ((dev, amount),) = per_device.items()
        units = self._pool.units_of.get(str(amount)) if type(amount) is Decimal else None
        i = self._pool.index.get(dev)
        if not units or i is None:
            return granted
        return self.by_device[i].get(units) or self.make(i, units)

    def make(self, i: int, units: int) -> DeviceAllocation:
        """The grant of ``units`` on device ``i``, made (and kept, within the bound) if new."""
        grant: DeviceAllocation = frozendict(
            {self._slot: frozendict({self._ids[i]: self._amount(self._pool, units)})}
        )
        if len(self.issued) >= CACHE_LIMIT:
            return grant
        # one grant per (device, amount) even when two threads get here at once
        kept = self.by_device[i].setdefault(units, grant)
        if kept is grant:
            self.issued[id(grant)] = (i, units)
        return kept


class AmountTable(dict[int, Decimal]):
    """The amount of each count of units of one pool, made on first use and kept (within the
    bound): ``table[units]`` costs one lookup where ``amount_of.get(units) or amount(pool,
    units)`` costs a call and a truth test."""

    __slots__ = ("_amount", "_pool")

    def __init__(self, pool: SlotPool, amount: Callable[[SlotPool, int], Decimal]) -> None:
        super().__init__()
        self._pool = pool
        self._amount = amount

    def __missing__(self, units: int) -> Decimal:
        made = self._amount(self._pool, units)
        if len(self) < CACHE_LIMIT:
            self[units] = made
        return made
