"""Integer bookkeeping of one slot's devices, shared by both map kinds.

Amounts are kept as ints in the map's unit (1 for discrete and UNIQUE slots, the quantum for
fraction slots) so the hot path never does Decimal arithmetic. Devices are indexed in the
order the map was given them; ``buckets`` groups them by free amount as bitmasks, so finding
"the most free devices" or "every device of NUMA node 1 with 3 units free" costs a few integer
operations instead of a sort over all devices.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from accelkit.types import DeviceId, SlotName, SlotType

Node = int | None


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
    """Capacity, free amounts and indexes of the (masked) devices of one slot."""

    __slots__ = (
        "bits",
        "buckets",
        "cap",
        "free",
        "ids",
        "index",
        "max_cap",
        "name",
        "node",
        "node_free",
        "node_mask",
        "nodes",
        "slot_type",
        "total_cap",
        "total_free",
        "unique",
    )

    def __init__(
        self,
        name: SlotName,
        slot_type: SlotType,
        ids: Sequence[DeviceId],
        caps: Sequence[int],
        nodes: Sequence[Node],
    ) -> None:
        self.name = name
        self.slot_type = slot_type
        self.unique = slot_type is SlotType.UNIQUE
        self.ids: tuple[DeviceId, ...] = tuple(ids)
        self.index: dict[DeviceId, int] = {d: i for i, d in enumerate(self.ids)}
        self.bits: tuple[int, ...] = tuple(1 << i for i in range(len(self.ids)))
        self.cap: list[int] = list(caps)
        self.free: list[int] = list(caps)
        self.node: list[Node] = list(nodes)
        self.total_cap = sum(self.cap)
        self.total_free = self.total_cap
        self.max_cap = max(self.cap, default=0)
        self.buckets: dict[int, int] = {}
        self.node_mask: dict[Node, int] = {}
        self.node_free: dict[Node, int] = {}
        for i, (c, n) in enumerate(zip(self.cap, self.node, strict=True)):
            self.node_mask[n] = self.node_mask.get(n, 0) | self.bits[i]
            self.node_free[n] = self.node_free.get(n, 0) + c
            if c:
                self.buckets[c] = self.buckets.get(c, 0) | self.bits[i]
        self.nodes: tuple[Node, ...] = tuple(sorted(self.node_mask, key=_node_key))

    @property
    def all_mask(self) -> int:
        """Bitmask of every device of the pool."""
        return (1 << len(self.ids)) - 1

    def allocated(self, i: int) -> int:
        """Units allocated on device ``i``."""
        return self.cap[i] - self.free[i]

    def groups(self, mask: int) -> list[tuple[int, int]]:
        """``(free, bitmask)`` of the devices in ``mask`` with free capacity, least free first."""
        found = []
        for v, bits in self.buckets.items():
            if sub := bits & mask:
                found.append((v, sub))
        found.sort()
        return found

    def most_free(self, mask: int) -> int:
        """The largest free amount of a device in ``mask`` (0 when none has any)."""
        best = 0
        for v, bits in self.buckets.items():
            if v > best and bits & mask:
                best = v
        return best

    def take(self, i: int, units: int) -> None:
        """Move ``units`` of device ``i`` from free to allocated (negative gives back)."""
        old = self.free[i]
        new = old - units
        bit = self.bits[i]
        buckets = self.buckets
        if old:
            rest = buckets[old] ^ bit
            if rest:
                buckets[old] = rest
            else:
                del buckets[old]
        if new:
            buckets[new] = buckets.get(new, 0) | bit
        self.free[i] = new
        self.node_free[self.node[i]] -= units
        self.total_free -= units
