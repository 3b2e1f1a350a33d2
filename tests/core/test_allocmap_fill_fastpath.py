"""FILL's fast path places and commits in one pass: it must grant exactly what
:func:`~accelkit.allocmap.fillrule.fill` places and leave the pool's indexes consistent."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelkit.allocmap import (
    AbstractAllocMap,
    AffinityHint,
    AffinityPolicy,
    AllocationStrategy,
    DiscretePropertyAllocMap,
    FractionAllocMap,
)
from accelkit.allocmap.fillrule import fill
from accelkit.allocmap.pool import ScannedPool, SlotPool
from accelkit.errors import InsufficientResource
from accelkit.types import DeviceAllocation, DeviceId, DeviceSlotInfo, SlotName, SlotType

D = Decimal
S = SlotName("cuda.shares")
FILL = AllocationStrategy.FILL
ROOT = {DeviceId("root"): DeviceSlotInfo(SlotType.BYTES, SlotName("mem"), D(1024))}


def gpus(caps: list[int]) -> dict[DeviceId, DeviceSlotInfo]:
    return {
        DeviceId(f"cuda{i}"): DeviceSlotInfo(SlotType.COUNT, S, D(c), i % 2)
        for i, c in enumerate(caps)
    }


def consistent(pool: SlotPool) -> None:
    """Buckets, total_free and free agree, unavailable devices aside."""
    buckets: dict[int, int] = {}
    for i, f in enumerate(pool.free):
        if f and i not in pool.hidden:
            buckets[f] = buckets.get(f, 0) | pool.bits[i]
    assert pool.buckets == buckets
    assert pool.total_free == sum(f for i, f in enumerate(pool.free) if i not in pool.hidden)


def expected(m: AbstractAllocMap, pool: SlotPool, units: int) -> dict[DeviceId, Decimal]:
    return {pool.ids[i]: m._amount(pool, u) for i, u in fill(pool, pool.all_mask, units)}


@pytest.mark.parametrize(
    "make",
    [
        lambda caps: DiscretePropertyAllocMap(gpus(caps), strategy=FILL),
        lambda caps: FractionAllocMap(gpus(caps), strategy=FILL, quantum_size=D(1)),
        # a map of two slots takes the general closures, not the one-pool ones
        lambda caps: FractionAllocMap(gpus(caps) | ROOT, strategy=FILL, quantum_size=D(1)),
    ],
    ids=["discrete", "fraction", "two-slots"],
)
@settings(max_examples=120, deadline=None)
@given(
    caps=st.lists(st.integers(1, 6), min_size=2, max_size=7),
    steps=st.lists(
        st.tuples(st.sampled_from(["allocate", "free", "fence"]), st.integers(1, 20)),
        max_size=40,
    ),
)
def test_fill_grants_what_fill_places_and_keeps_the_pool_consistent(
    make: object, caps: list[int], steps: list[tuple[str, int]]
) -> None:
    m: AbstractAllocMap = make(caps)  # type: ignore[operator]
    pool = m._pools[S]
    held: list[DeviceAllocation] = []
    for op, n in steps:
        if op == "allocate":
            want = expected(m, pool, n) if n <= pool.total_free else None
            try:
                got = m.allocate({S: D(n)})
            except InsufficientResource:
                assert want is None
            else:
                assert got == {S: want}
                assert list(got[S]) == list(want or {})  # the same order: most free first
                held.append(got)
        elif op == "free" and held:
            m.free(held.pop(n % len(held)))
        elif op == "fence":
            m.set_unavailable(
                frozenset({DeviceId(f"cuda{n % len(caps)}")}) if n % 3 else frozenset()
            )
        consistent(pool)
    m.set_unavailable(frozenset())
    for grant in held:
        m.free(grant)
    consistent(pool)
    assert pool.total_free == sum(caps)


def test_a_split_takes_the_most_free_devices_whole_and_the_last_in_part() -> None:
    m = FractionAllocMap(gpus([1, 1, 1, 1]), strategy=FILL, quantum_size=D("0.1"))
    m.allocate({S: D("0.5")})  # cuda0 keeps 0.5
    m.allocate({S: D("0.8")})  # cuda1 keeps 0.2
    grant = m.allocate({S: D("2.3")})
    assert grant == {S: {"cuda2": D("1.0"), "cuda3": D("1.0"), "cuda0": D("0.3")}}
    assert m.allocatable() == {S: D("0.4")}
    consistent(m._pools[S])
    m.free(grant)
    consistent(m._pools[S])
    assert m.allocatable() == {S: D("2.7")}


def test_fill_maps_of_one_slot_over_a_few_devices_scan_instead_of_keeping_buckets() -> None:
    def pool_of(m: AbstractAllocMap) -> SlotPool:
        return m._pools[S]

    assert isinstance(pool_of(FractionAllocMap(gpus([1] * 16), strategy=FILL)), ScannedPool)
    assert not isinstance(pool_of(FractionAllocMap(gpus([1] * 17), strategy=FILL)), ScannedPool)
    assert not isinstance(pool_of(FractionAllocMap(gpus([1] * 8))), ScannedPool)  # EVENLY
    # without fragmentation a split must also fit on as few devices as it needs: not FILL's
    # fast path, which places by scanning
    unsplit = FractionAllocMap(gpus([1] * 8), strategy=FILL, allow_fragmentation=False)
    assert not isinstance(pool_of(unsplit), ScannedPool)
    assert not isinstance(  # several slots: the general closures work on buckets
        pool_of(FractionAllocMap(gpus([1] * 8) | ROOT, strategy=FILL)), ScannedPool
    )


def test_a_scanned_pool_serves_hints_splits_and_unavailable_devices() -> None:
    m = FractionAllocMap(gpus([2, 2, 2, 2]), strategy=FILL, quantum_size=D(1))
    pool = m._pools[S]
    assert isinstance(pool, ScannedPool)
    near = m.allocate({S: D(3)}, affinity_hint=AffinityHint(AffinityPolicy.INTERLEAVED, {1}))
    assert near == {S: {"cuda1": D(2), "cuda3": D(1)}}  # odd devices are on node 1
    consistent(pool)
    m.set_unavailable(frozenset({DeviceId("cuda0")}))
    assert m.allocate({S: D(1)}) == {S: {"cuda2": D(1)}}  # cuda0 is hidden, cuda2 most free
    with pytest.raises(InsufficientResource, match="unavailable, unhealthy or cordoned: cuda0"):
        m.allocate({S: D(3)})
    consistent(pool)
    m.set_unavailable(frozenset())
    assert m.allocate({S: D(3)}) == {S: {"cuda0": D(2), "cuda2": D(1)}}
    m.free(near)
    assert m.allocatable() == {S: D(4)}
    consistent(pool)


@pytest.mark.parametrize("hidden", [0, 1, 2])
def test_a_split_freed_while_one_of_its_devices_is_unavailable_is_freed_whole(
    hidden: int,
) -> None:
    m = FractionAllocMap(gpus([2, 2, 2, 2]), strategy=FILL, quantum_size=D(1))
    pool = m._pools[S]
    m.free(m.allocate({S: D(5)}))  # an amount seen before takes the fast path
    m.allocate({S: D(1)})  # cuda0 keeps 1
    grant = m.allocate({S: D(5)})
    assert list(grant[S]) == ["cuda1", "cuda2", "cuda3"]
    # the fast path frees device by device and must undo those before the unavailable one
    m.set_unavailable(frozenset({DeviceId(list(grant[S])[hidden])}))
    m.free(grant)
    assert m.allocations[S] == {"cuda0": D(1), "cuda1": D(0), "cuda2": D(0), "cuda3": D(0)}
    consistent(pool)
    m.set_unavailable(frozenset())
    assert m.allocatable() == {S: D(7)}
    consistent(pool)
