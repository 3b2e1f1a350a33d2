"""Unavailable devices (``set_unavailable``): no new grant in any strategy or path, frees and
applies still work, and taking devices out and back changes no capacity."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
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
from accelkit.errors import InsufficientResource, InvalidResourceArgument, ResourceError
from accelkit.types import DeviceAllocation, DeviceId, DeviceSlotInfo, SlotName, SlotType

D = Decimal
CORES = SlotName("cpu")
SHARES = SlotName("cuda.shares")
MIG = SlotName("cuda.mig-1g")
MEM = SlotName("mem")
FILL, EVENLY = AllocationStrategy.FILL, AllocationStrategy.EVENLY


def dev(i: int, prefix: str = "d") -> DeviceId:
    return DeviceId(f"{prefix}{i}")


def devices(
    slot: SlotName, caps: list[str], *, prefix: str = "d", kind: SlotType = SlotType.COUNT
) -> dict[DeviceId, DeviceSlotInfo]:
    return {
        dev(i, prefix): DeviceSlotInfo(kind, slot, D(c), numa_node=i % 2)
        for i, c in enumerate(caps)
    }


def discrete(strategy: AllocationStrategy, caps: list[str]) -> AbstractAllocMap:
    return DiscretePropertyAllocMap(devices(CORES, caps), strategy=strategy)


def fraction(
    strategy: AllocationStrategy, caps: list[str], *, fragmentation: bool = True
) -> AbstractAllocMap:
    return FractionAllocMap(
        devices(SHARES, caps),
        strategy=strategy,
        quantum_size=D("0.25"),
        allow_fragmentation=fragmentation,
    )


def used(grant: DeviceAllocation) -> set[DeviceId]:
    return {d for per_device in grant.values() for d, a in per_device.items() if a > 0}


def snapshot(m: AbstractAllocMap) -> dict[SlotName, dict[DeviceId, Decimal]]:
    return {s: dict(a) for s, a in m.allocations.items()}


MAPS: dict[str, tuple[Callable[[], AbstractAllocMap], SlotName, Decimal]] = {
    "discrete FILL": (lambda: discrete(FILL, ["4", "4", "4"]), CORES, D(1)),
    "discrete EVENLY": (lambda: discrete(EVENLY, ["4", "4", "4"]), CORES, D(1)),
    "fraction FILL": (lambda: fraction(FILL, ["1", "1", "1"]), SHARES, D("0.25")),
    "fraction EVENLY": (lambda: fraction(EVENLY, ["1", "1", "1"]), SHARES, D("0.25")),
    "fraction no fragmentation": (
        lambda: fraction(FILL, ["1", "1", "1"], fragmentation=False),
        SHARES,
        D("0.25"),
    ),
    "discrete UNIQUE": (
        lambda: DiscretePropertyAllocMap(devices(MIG, ["1", "1", "1"], kind=SlotType.UNIQUE)),
        MIG,
        D(1),
    ),
    "fraction UNIQUE": (
        lambda: FractionAllocMap(devices(MIG, ["1", "1", "1"], kind=SlotType.UNIQUE)),
        MIG,
        D(1),
    ),
}


@pytest.mark.parametrize("name", sorted(MAPS))
@pytest.mark.parametrize("hint", [None, AffinityHint(AffinityPolicy.PREFER_SINGLE_NODE)])
def test_an_unavailable_device_takes_no_grant_until_it_is_back(
    name: str, hint: AffinityHint | None
) -> None:
    factory, slot, unit = MAPS[name]
    m = factory()
    m.set_unavailable(frozenset({dev(1)}))
    assert m.unavailable_devices == {dev(1)}
    grants = []
    while True:  # everything the other devices hold, one unit at a time (the fast path)
        try:
            grants.append(m.allocate({slot: unit}, affinity_hint=hint))
        except InsufficientResource as exc:
            refused = exc
            break
    assert all(used(g) <= {dev(0), dev(2)} for g in grants)
    assert len(grants) == 2 * int(m.capacity()[slot] / 3 / unit)
    assert refused.allocatable == 0
    assert "unavailable, unhealthy or cordoned: d1" in str(refused)
    assert m.allocatable()[slot] == 0
    m.set_unavailable(frozenset())
    assert m.unavailable_devices == frozenset()
    assert used(m.allocate({slot: unit}, affinity_hint=hint)) == {dev(1)}


@pytest.mark.parametrize(
    ("strategy", "request_", "expected"),
    [
        (FILL, "6", {dev(0): D(4), dev(2): D(2)}),
        (EVENLY, "6", {dev(0): D(3), dev(2): D(3)}),
        (EVENLY, "2", {dev(0): D(1), dev(2): D(1)}),
    ],
)
def test_discrete_strategies_split_over_the_available_devices_only(
    strategy: AllocationStrategy, request_: str, expected: dict[DeviceId, Decimal]
) -> None:
    m = discrete(strategy, ["4", "4", "4"])
    m.set_unavailable(frozenset({dev(1)}))
    assert m.allocate({CORES: D(request_)}) == {CORES: expected}


@pytest.mark.parametrize(
    ("strategy", "request_", "expected"),
    [
        (FILL, "1.5", {dev(0): D("1"), dev(2): D("0.5")}),
        (EVENLY, "1.5", {dev(0): D("0.75"), dev(2): D("0.75")}),
        (EVENLY, "0.5", {dev(0): D("0.5")}),
    ],
)
def test_fraction_strategies_split_over_the_available_devices_only(
    strategy: AllocationStrategy, request_: str, expected: dict[DeviceId, Decimal]
) -> None:
    m = fraction(strategy, ["1", "1", "1"])
    m.set_unavailable(frozenset({dev(1)}))
    assert m.allocate({SHARES: D(request_)}) == {SHARES: expected}


def test_numa_hints_never_reach_an_unavailable_device() -> None:
    m = discrete(FILL, ["4", "4", "4", "4"])  # d0, d2 on node 0; d1, d3 on node 1
    m.set_unavailable(frozenset({dev(0)}))
    hint = AffinityHint(AffinityPolicy.PREFER_SINGLE_NODE, frozenset({0}))
    assert m.allocate({CORES: D(6)}, affinity_hint=hint) == {CORES: {dev(2): D(4), dev(1): D(2)}}
    interleaved = AffinityHint(AffinityPolicy.INTERLEAVED)
    assert dev(0) not in used(m.allocate({CORES: D(6)}, affinity_hint=interleaved))


def test_a_one_device_pool_refuses_while_unavailable_and_frees_on_it_still_count() -> None:
    m = DiscretePropertyAllocMap(devices(MEM, ["1000"], prefix="root"))
    held = m.allocate({MEM: D(600)})
    m.set_unavailable(frozenset({DeviceId("root0")}))
    with pytest.raises(InsufficientResource, match=r"cordoned: root0") as refused:
        m.allocate({MEM: D(1)})
    assert refused.value.allocatable == 0
    assert m.allocatable() == {MEM: D(0)}
    m.free(held)  # the fast path of free hands it to the general one
    assert m.allocations == {MEM: {DeviceId("root0"): D(0)}}
    with pytest.raises(InvalidResourceArgument, match="only 0 allocated"):
        m.free(held)
    m.apply_allocation({MEM: {DeviceId("root0"): D(1000)}})
    with pytest.raises(InvalidResourceArgument, match="only 0 free"):
        m.apply_allocation({MEM: {DeviceId("root0"): D(1)}})
    m.free({MEM: {DeviceId("root0"): D(1000)}})
    m.set_unavailable(frozenset())
    assert m.allocatable() == {MEM: D(1000)}
    assert m.allocate({MEM: D(1000)}) == {MEM: {DeviceId("root0"): D(1000)}}


def test_maps_of_several_slots_fence_each_slot_and_refuse_atomically() -> None:
    slots = devices(CORES, ["2", "2"]) | devices(MEM, ["100"], prefix="root")
    m = DiscretePropertyAllocMap(slots)
    m.set_unavailable(frozenset({DeviceId("root0"), dev(0)}))
    before = snapshot(m)
    with pytest.raises(InsufficientResource, match=r"'mem'.*cordoned: root0"):
        m.allocate({CORES: D(1), MEM: D(10)})
    assert snapshot(m) == before
    with pytest.raises(InsufficientResource, match=r"'cpu'.*cordoned: d0"):
        m.allocate({CORES: D(3)})
    assert m.allocate({CORES: D(2)}) == {CORES: {dev(1): D(2)}}


@pytest.mark.parametrize("name", sorted(MAPS))
def test_frees_and_applies_on_unavailable_devices_still_work(name: str) -> None:
    factory, slot, unit = MAPS[name]
    m = factory()
    held = [m.allocate({slot: unit}) for _ in range(3)]
    on = {d for g in held for d in used(g)}
    m.set_unavailable(frozenset(on))
    assert m.allocatable()[slot] == m.capacity()[slot] - len(held) * unit - sum(
        (m.capacity()[slot] / 3 - len([g for g in held if d in used(g)]) * unit for d in on),
        D(0),
    )
    for g in held:
        m.free(g)
    assert all(a == 0 for a in m.allocations[slot].values())
    with pytest.raises(InvalidResourceArgument, match="allocated"):
        m.free(held[0])
    for g in held:
        m.apply_allocation(g)
    assert sum(m.allocations[slot].values()) == len(held) * unit
    for g in held:
        m.free(g)
    m.set_unavailable(frozenset())
    assert m.allocatable() == m.capacity()


def test_several_device_frees_on_an_unavailable_device_take_the_general_path() -> None:
    m = fraction(FILL, ["1", "1"])
    held = m.allocate({SHARES: D("1.5")})
    assert used(held) == {dev(0), dev(1)}
    m.set_unavailable(frozenset({dev(1)}))
    m.free(held)
    assert m.allocatable() == {SHARES: D(1)}
    m.set_unavailable(frozenset())
    assert m.allocatable() == {SHARES: D(2)}
    assert m.allocate({SHARES: D(2)}) == {SHARES: {dev(0): D(1), dev(1): D(1)}}


def test_the_set_replaces_and_ignores_devices_the_map_does_not_have() -> None:
    m = DiscretePropertyAllocMap(devices(CORES, ["1", "1", "1"]), device_mask=[dev(0), dev(1)])
    m.set_unavailable(frozenset({dev(0), dev(2), DeviceId("elsewhere")}))
    assert m.unavailable_devices == {dev(0)}  # d2 is outside the mask
    m.set_unavailable(frozenset({dev(1)}))
    assert m.unavailable_devices == {dev(1)}
    assert m.allocate({CORES: D(1)}) == {CORES: {dev(0): D(1)}}
    m.set_unavailable(frozenset({dev(1)}))  # the same set again changes nothing
    assert m.allocatable() == {CORES: D(0)}


def test_device_ids_that_are_not_strings_are_refused() -> None:
    m = discrete(FILL, ["1"])
    with pytest.raises(InvalidResourceArgument, match="unavailable devices must be strings"):
        m.set_unavailable(frozenset({1}))  # type: ignore[arg-type]
    assert m.unavailable_devices == frozenset()


def test_threads_never_get_a_device_while_it_is_unavailable() -> None:
    m = fraction(EVENLY, ["1", "1", "1", "1"])
    out = frozenset({dev(3)})
    m.set_unavailable(out)
    stop = threading.Event()
    bad: list[DeviceAllocation] = []

    def toggle() -> None:
        others = [frozenset({dev(0)}), frozenset({dev(1), dev(2)}), frozenset()]
        n = 0
        while not stop.is_set():
            m.set_unavailable(out | others[n % 3])
            n += 1

    def work() -> None:
        for _ in range(3000):
            try:
                g = m.allocate({SHARES: D("0.5")})
            except InsufficientResource:
                continue
            if dev(3) in used(g):
                bad.append(g)
            m.free(g)

    toggler = threading.Thread(target=toggle)
    workers = [threading.Thread(target=work) for _ in range(3)]
    toggler.start()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    stop.set()
    toggler.join()
    assert bad == []
    m.set_unavailable(frozenset())
    assert m.allocatable() == m.capacity() == {SHARES: D(4)}


ops = st.lists(
    st.one_of(
        st.tuples(st.just("allocate"), st.sampled_from(["0.25", "0.5", "1", "1.5", "2.25"])),
        st.tuples(st.just("hinted"), st.sampled_from(["0.5", "1.25", "2"])),
        st.tuples(st.just("free"), st.integers(0, 20)),
        st.tuples(st.just("fence"), st.frozensets(st.integers(0, 3))),
    ),
    max_size=50,
)


def _check_accounting(
    m: AbstractAllocMap, held: list[DeviceAllocation], caps: Mapping[DeviceId, Decimal]
) -> None:
    allocated = dict.fromkeys(caps, D(0))
    for g in held:
        for d, a in g[SHARES].items():
            allocated[d] += a
    assert m.allocations[SHARES] == allocated
    open_ = [d for d in caps if d not in m.unavailable_devices]
    assert m.allocatable()[SHARES] == sum((caps[d] - allocated[d] for d in open_), D(0))


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from([FILL, EVENLY]),
    st.lists(st.sampled_from(["0.5", "1", "1.5"]), min_size=4, max_size=4),
    ops,
)
def test_no_grant_lands_on_an_unavailable_device_and_fencing_changes_no_capacity(
    strategy: AllocationStrategy, caps: list[str], steps: list[tuple[str, object]]
) -> None:
    m = fraction(strategy, caps)
    capacity = {dev(i): D(c) for i, c in enumerate(caps)}
    held: list[DeviceAllocation] = []
    for op, arg in steps:
        out = m.unavailable_devices
        if op == "fence":
            assert isinstance(arg, frozenset)
            m.set_unavailable(frozenset(dev(i) for i in arg))
        elif op == "free":
            assert isinstance(arg, int)
            if held:
                m.free(held.pop(arg % len(held)))
        else:
            hint = AffinityHint(AffinityPolicy.INTERLEAVED) if op == "hinted" else None
            before = snapshot(m)
            try:
                g = m.allocate({SHARES: D(str(arg))}, affinity_hint=hint)
            except ResourceError:
                assert snapshot(m) == before
            else:
                assert not used(g) & out
                assert sum(g[SHARES].values()) == D(str(arg))
                held.append(g)
        _check_accounting(m, held, capacity)
    m.set_unavailable(frozenset())
    _check_accounting(m, held, capacity)
    for g in held:
        m.free(g)
    assert m.allocatable() == m.capacity()
