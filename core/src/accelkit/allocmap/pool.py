"""Integer bookkeeping of one slot's devices, shared by both map kinds.

Amounts are kept as ints in the map's unit (1 for discrete and UNIQUE slots, the quantum for
fraction slots) so the hot path never does Decimal arithmetic. Devices are indexed in the
order the map was given them; ``buckets`` groups them by free amount as bitmasks, so finding
"the most free devices" or "the free capacity of NUMA node 1" costs a few integer operations
per distinct free amount instead of a pass over every device.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from decimal import Decimal

from accelkit.types import DeviceId, SlotName, SlotType

Node = int | None

# Conversions between Decimal amounts and units are cached per map; a bound keeps a stream of
# distinct byte amounts from growing the caches without limit.
CACHE_LIMIT = 4096


def iter_bits(bits: int) -> Iterator[int]:
    """Yield the indices of the set bits of ``bits``, lowest first (device order)."""
    while bits:
        low = bits & -bits
        bits ^= low
        yield low.bit_length() - 1


def _node_key(node: Node) -> tuple[int, int]:
    # Devices without a NUMA node sort after every real node.
    return (1, 0) if node is None else (0, node)


class SlotPool:
    """Capacity, free amounts and indexes of the (masked) devices of one slot.

    Single-device pools (a ``mem`` root) never need a placement decision, so they skip the
    bucket bookkeeping (``bucketed`` is false) and their buckets stay empty.

    An unavailable device (:meth:`fence`) shows no free amount to placement: its ``free`` entry
    is 0, it is in no bucket and not in ``total_free``, while ``hidden`` keeps its real free
    amount, which frees and applies of allocations on it change (:meth:`change`). ``gate`` is
    the most a device's ``free`` may reach on the fast paths of free: its capacity, or -1 for
    an unavailable device, so those paths hand such frees to the general one at no extra cost.
    """

    __slots__ = (
        "all_mask",
        "amount_of",
        "bits",
        "bucketed",
        "buckets",
        "cap",
        "free",
        "gate",
        "hidden",
        "ids",
        "index",
        "max_cap",
        "name",
        "node",
        "node_mask",
        "nodes",
        "quick",
        "simple",
        "slot_type",
        "total_cap",
        "total_free",
        "unique",
        "units_of",
        "whole",
    )

    def __init__(
        self,
        name: SlotName,
        slot_type: SlotType,
        ids: Sequence[DeviceId],
        caps: Sequence[int],
        nodes: Sequence[Node],
        *,
        whole: bool = False,
    ) -> None:
        self.name = name
        self.slot_type = slot_type
        self.unique = slot_type is SlotType.UNIQUE
        # granted in whole units only, whatever the map's other slots are (UNIQUE slots too)
        self.whole = whole or self.unique
        self.ids: tuple[DeviceId, ...] = tuple(ids)
        self.index: dict[DeviceId, int] = {d: i for i, d in enumerate(self.ids)}
        self.bits: tuple[int, ...] = tuple(1 << i for i in range(len(self.ids)))
        self.cap: list[int] = list(caps)
        self.free: list[int] = list(caps)
        self.gate: list[int] = list(caps)
        self.hidden: dict[int, int] = {}
        self.node: tuple[Node, ...] = tuple(nodes)
        self.total_cap = sum(self.cap)
        self.total_free = self.total_cap
        self.max_cap = max(self.cap, default=0)
        self.all_mask = (1 << len(self.ids)) - 1
        self.bucketed = len(self.ids) > 1
        # One device and whole-amount requests: allocate and free need no placement at all.
        self.simple = len(self.ids) == 1 and not self.unique
        # Several devices, whole-amount requests: what the general fast path places.
        self.quick = self.bucketed and not self.unique
        self.buckets: dict[int, int] = {}
        self.node_mask: dict[Node, int] = {}
        for i, (c, n) in enumerate(zip(self.cap, self.node, strict=True)):
            self.node_mask[n] = self.node_mask.get(n, 0) | self.bits[i]
            if c and self.bucketed:
                self.buckets[c] = self.buckets.get(c, 0) | self.bits[i]
        self.nodes: tuple[Node, ...] = tuple(sorted(self.node_mask, key=_node_key))
        # Set by the owning map: its Decimal <-> units caches for this pool's unit.
        # units_of is keyed by str(amount) of exact Decimals: equal strings are equal Decimals,
        # and a string hashes in a tenth of the time a new Decimal takes (0.25: 28 vs 280 ns).
        self.units_of: dict[str, int] = {}
        self.amount_of: dict[int, Decimal] = {}

    def groups(self, mask: int) -> list[tuple[int, int]]:
        """``(free, bitmask)`` of the devices in ``mask`` with free capacity, least free first."""
        if mask == self.all_mask:
            # Buckets are never empty, so without a mask to apply they are the answer.
            return sorted(self.buckets.items())
        found = []
        for v, bits in self.buckets.items():
            if sub := bits & mask:
                found.append((v, sub))
        found.sort()
        return found

    def most_free(self, mask: int) -> int:
        """The largest free amount of a device in ``mask`` (0 when none has any)."""
        if mask == self.all_mask:
            return max(self.buckets, default=0)
        best = 0
        for v, bits in self.buckets.items():
            if v > best and bits & mask:
                best = v
        return best

    def free_in(self, mask: int) -> int:
        """Total free units of the devices in ``mask``."""
        return sum(v * (bits & mask).bit_count() for v, bits in self.buckets.items())

    def real_free(self, i: int) -> int:
        """The free units of device ``i``, unavailable or not."""
        hidden = self.hidden
        return hidden[i] if hidden and i in hidden else self.free[i]

    def fence(self, i: int) -> None:
        """Make device ``i`` unavailable: placement no longer sees its free units."""
        if i in self.hidden:
            return
        f = self.free[i]
        self.hidden[i] = f
        self.gate[i] = -1
        if f:
            self.free[i] = 0
            self.total_free -= f
            if self.bucketed:
                buckets, bit = self.buckets, self.bits[i]
                rest = buckets[f] ^ bit
                if rest:
                    buckets[f] = rest
                else:
                    del buckets[f]

    def unfence(self, i: int) -> None:
        """Make device ``i`` available again with the free units it has now."""
        f = self.hidden.pop(i, None)
        if f is None:
            return
        self.gate[i] = self.cap[i]
        if f:
            self.free[i] = f
            self.total_free += f
            if self.bucketed:
                self.buckets[f] = self.buckets.get(f, 0) | self.bits[i]

    def change(self, grants: list[tuple[int, int]], sign: int) -> None:
        """:meth:`shift`, also on unavailable devices (applies and frees of held grants)."""
        hidden = self.hidden
        if not hidden:
            self.shift(grants, sign)
            return
        open_ = []
        for i, units in grants:
            if i in hidden:
                hidden[i] -= sign * units
            else:
                open_.append((i, units))
        self.shift(open_, sign)

    def take(self, grants: list[tuple[int, int]]) -> None:
        """Move each ``(device, units)`` of ``grants`` from free to allocated."""
        self.change(grants, 1)

    def shift(self, grants: list[tuple[int, int]], sign: int) -> None:
        """Allocate (``sign`` 1) or free (``sign`` -1) each ``(device, units)`` of ``grants``."""
        free = self.free
        total = 0
        if not self.bucketed:
            for i, units in grants:
                free[i] -= sign * units
                total += units
            self.total_free -= sign * total
            return
        buckets = self.buckets
        bits = self.bits
        for i, units in grants:
            old = free[i]
            new = old - sign * units
            free[i] = new
            total += units
            bit = bits[i]
            if old:
                rest = buckets[old] ^ bit
                if rest:
                    buckets[old] = rest
                else:
                    del buckets[old]
            if new:
                buckets[new] = buckets.get(new, 0) | bit
        self.total_free -= sign * total


class OneDevicePool(SlotPool):
    """A pool of one device (not UNIQUE): its free amount is the pool's free amount.

    ``total_free`` reads ``free[0]`` and ignores writes, so the one-device fast path updates
    a single number; :meth:`SlotPool.shift` changes ``free[0]`` itself.
    """

    __slots__ = ()

    @property
    def total_free(self) -> int:
        return self.free[0]

    @total_free.setter
    def total_free(self, value: int) -> None:
        pass


class ScannedPool(SlotPool):
    """A pool of a few devices (not UNIQUE) of a map that fills the most free device first.

    FILL only ever asks for the most free device, and over a few devices ``max(free)`` finds
    it for less than keeping the buckets up to date on every allocate and free costs (W3
    FILL). So this pool keeps no buckets: :attr:`buckets` is built from ``free`` when
    placement reads it (requests with an affinity hint, and whatever the general methods
    place), and only ``free`` and ``total_free`` change.
    """

    __slots__ = ()

    @property
    def buckets(self) -> dict[int, int]:
        """Devices with free units grouped by free amount, as bitmasks (built when read)."""
        out: dict[int, int] = {}
        for i, f in enumerate(self.free):
            if f:
                out[f] = out.get(f, 0) | (1 << i)
        return out

    @buckets.setter
    def buckets(self, value: dict[int, int]) -> None:
        pass  # SlotPool.__init__ sets them; they are never kept

    def fence(self, i: int) -> None:
        """Make device ``i`` unavailable: placement no longer sees its free units."""
        if i not in self.hidden:
            self.hidden[i] = f = self.free[i]
            self.gate[i] = -1
            self.free[i] = 0
            self.total_free -= f

    def unfence(self, i: int) -> None:
        """Make device ``i`` available again with the free units it has now."""
        f = self.hidden.pop(i, None)
        if f is not None:
            self.gate[i] = self.cap[i]
            self.free[i] = f
            self.total_free += f

    def shift(self, grants: list[tuple[int, int]], sign: int) -> None:
        """Allocate (``sign`` 1) or free (``sign`` -1) each ``(device, units)`` of ``grants``."""
        free = self.free
        total = 0
        for i, units in grants:
            free[i] -= sign * units
            total += units
        self.total_free -= sign * total


#: pools of a FILL map with up to this many devices are :class:`ScannedPool`: on the W3 FILL
#: trace scaled to n devices scanning cost 2.7/3.0/3.5 floor units at n = 8/12/16 against
#: 3.5/3.6/4.0 with buckets, and the same at 24
SCAN_LIMIT = 16


def new_pool(
    name: SlotName,
    slot_type: SlotType,
    ids: Sequence[DeviceId],
    caps: Sequence[int],
    nodes: Sequence[Node],
    *,
    scan: bool = False,
    whole: bool = False,
) -> SlotPool:
    """A :class:`OneDevicePool` for one device that is not UNIQUE; with ``scan`` (a map that
    fills the most free device first), a :class:`ScannedPool` for a few; else a
    :class:`SlotPool`."""
    cls: type[SlotPool] = SlotPool
    if slot_type is not SlotType.UNIQUE:
        if len(ids) == 1:
            cls = OneDevicePool
        elif scan and len(ids) <= SCAN_LIMIT:
            cls = ScannedPool
    return cls(name, slot_type, ids, caps, nodes, whole=whole)
