"""Maps of one slot over several devices share one-device grants and know their splits again."""

from __future__ import annotations

import copy
import json
import threading
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelkit.allocmap import AllocationStrategy, DiscretePropertyAllocMap, FractionAllocMap
from accelkit.allocmap.base import AbstractAllocMap
from accelkit.errors import InsufficientResource, InvalidResourceArgument
from accelkit.types import DeviceId, DeviceSlotInfo, SlotName, SlotType

D = Decimal
S = SlotName("cuda.shares")


def shares(n: int) -> dict[DeviceId, DeviceSlotInfo]:
    return {
        DeviceId(f"cuda{i}"): DeviceSlotInfo(SlotType.COUNT, S, D("1.0"), i % 2) for i in range(n)
    }


# FILL over a few devices scans (fillscan), FILL over many keeps buckets, EVENLY places;
# every map is filled to 4 devices' worth of free shares before a test starts
MAPS = [
    pytest.param(
        lambda: FractionAllocMap(shares(4), strategy=AllocationStrategy.FILL), id="fill-scan"
    ),
    pytest.param(
        lambda: FractionAllocMap(shares(24), strategy=AllocationStrategy.FILL), id="fill-buckets"
    ),
    pytest.param(lambda: FractionAllocMap(shares(4)), id="evenly"),
]


def four_free(m: AbstractAllocMap) -> AbstractAllocMap:
    """``m`` with all but 4 devices taken whole (by requests it remembers nothing of)."""
    (total,) = m.allocatable().values()
    if total > 4:
        m.apply_allocation({S: {DeviceId(f"cuda{i}"): D(1) for i in range(4, int(total))}})
    return m


@pytest.mark.parametrize("make", MAPS)
def test_one_device_grants_of_an_amount_are_one_read_only_value(make) -> None:
    m: AbstractAllocMap = four_free(make())
    first = m.allocate({S: D("0.25")})
    (dev,) = first[S]
    m.free(first)
    again = m.allocate({S: D("0.25")})  # the same amount on the same (most free) device
    assert again == first
    assert again is first  # the same value: the same object
    with pytest.raises(TypeError):
        first[S][dev] = D(1)  # type: ignore[index]
    assert json.loads(json.dumps(first, default=str)) == {S: {dev: "0.25"}}
    m.free(again)
    assert m.allocatable() == {S: D("4.00")}


@pytest.mark.parametrize("make", MAPS)
def test_a_split_is_freed_once_then_checked_in_full(make) -> None:
    m: AbstractAllocMap = four_free(make())
    m.allocate({S: D("0.5")})
    split = m.allocate({S: D("1.75")})
    assert len(split[S]) > 1
    assert sum(split[S].values()) == D("1.75")
    m.free(split)
    assert m.allocatable() == {S: D("3.50")}
    with pytest.raises(InvalidResourceArgument):
        m.free(split)  # forgotten once freed: the full check refuses what is not held
    assert m.allocatable() == {S: D("3.50")}


@pytest.mark.parametrize("make", MAPS)
def test_copies_and_restored_grants_are_checked_in_full(make) -> None:
    m: AbstractAllocMap = four_free(make())
    split = m.allocate({S: D("1.75")})
    one = m.allocate({S: D("0.5")})
    m.free(copy.deepcopy(split))
    m.free(dict(one))
    assert m.allocatable() == {S: D("4.00")}
    with pytest.raises(InvalidResourceArgument):
        m.free(one)  # its amount went back with the copy
    with pytest.raises(InvalidResourceArgument):
        m.free(split)  # a room test refuses it: nothing is held there any more
    assert m.allocatable() == {S: D("4.00")}


@pytest.mark.parametrize("make", MAPS)
def test_a_grant_freed_while_its_device_is_unavailable_still_counts(make) -> None:
    m: AbstractAllocMap = four_free(make())
    one = m.allocate({S: D("0.5")})
    (dev,) = one[S]
    m.set_unavailable({dev})
    m.free(one)
    m.set_unavailable(set())
    assert m.allocatable() == {S: D("4.00")}


def test_a_split_on_a_discrete_map_comes_back_whole() -> None:
    devices = {
        DeviceId(str(i)): DeviceSlotInfo(SlotType.COUNT, SlotName("cpu"), D(1), i // 4)
        for i in range(8)
    }
    for strategy in AllocationStrategy:
        m = DiscretePropertyAllocMap(devices, strategy=strategy)
        grants = [m.allocate({SlotName("cpu"): D(3)}) for _ in range(2)]
        for g in grants:
            m.free(g)
        assert m.allocatable() == {SlotName("cpu"): D(8)}


@pytest.mark.parametrize("make", MAPS)
def test_threads_never_take_more_than_there_is(make) -> None:
    m: AbstractAllocMap = four_free(make())
    held: list[Decimal] = []
    lock = threading.Lock()
    amounts = [D("0.25"), D("0.5"), D("1.5"), D("0.1")]

    def worker(k: int) -> None:
        for i in range(300):
            try:
                grant = m.allocate({S: amounts[(i + k) % 4]})
            except InsufficientResource:
                continue
            got = sum(grant[S].values(), D(0))
            if i % 3:
                m.free(grant)
            else:
                with lock:
                    held.append(got)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(held, D(0)) <= 4
    assert m.allocatable() == {S: D("4.00") - sum(held, D(0))}


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(["fill-scan", "fill-buckets", "evenly"]),
    st.lists(st.tuples(st.booleans(), st.sampled_from(["0.1", "0.25", "0.5", "1", "1.5", "2.5"]))),
)
def test_the_free_amount_is_capacity_less_what_is_held(
    kind: str, steps: list[tuple[bool, str]]
) -> None:
    n = 24 if kind == "fill-buckets" else 4
    strategy = AllocationStrategy.EVENLY if kind == "evenly" else AllocationStrategy.FILL
    m = FractionAllocMap(shares(n), strategy=strategy)
    held: list[object] = []
    amounts: list[Decimal] = []
    for alloc, amount in steps:
        if alloc or not held:
            try:
                grant = m.allocate({S: D(amount)})
            except InsufficientResource:
                assert sum(amounts, D(0)) + D(amount) > n
                continue
            assert sum(grant[S].values(), D(0)) == D(amount)
            held.append(grant)
            amounts.append(D(amount))
        else:
            j = len(amounts) // 2
            m.free(held.pop(j))  # type: ignore[arg-type]
            amounts.pop(j)
        assert m.allocatable() == {S: D(n) - sum(amounts, D(0))}
