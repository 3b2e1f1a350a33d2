"""A map of one slot on one device hands out one read-only grant per amount and knows it again."""

from __future__ import annotations

import copy
import json
import threading
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelkit.allocmap import (
    AllocationStrategy,
    DiscretePropertyAllocMap,
    FractionAllocMap,
    namespaced,
    onedevice,
)
from accelkit.allocmap.base import AbstractAllocMap
from accelkit.errors import InsufficientResource, InvalidResourceArgument
from accelkit.types import DeviceId, DeviceSlotInfo, SlotName, SlotType

D = Decimal
MEM = SlotName("mem")
ROOT = DeviceId("root")


def mem_map(cap: int = 100, *, fraction: bool = False) -> AbstractAllocMap:
    devices = {ROOT: DeviceSlotInfo(SlotType.BYTES, MEM, D(cap))}
    if fraction:
        return FractionAllocMap(devices, strategy=AllocationStrategy.FILL, quantum_size=D(1))
    return DiscretePropertyAllocMap(devices, strategy=AllocationStrategy.FILL)


@pytest.mark.parametrize("fraction", [False, True])
def test_grants_of_one_amount_are_one_read_only_value(fraction: bool) -> None:
    m = mem_map(fraction=fraction)
    first = m.allocate({MEM: D(10)})
    second = m.allocate({MEM: D(10)})
    assert first == second == {"mem": {"root": D(10)}}
    assert second is m.allocate({MEM: D(10)})  # seen before: no new result is built
    assert m.allocatable() == {MEM: D(70)}
    with pytest.raises(TypeError):
        first[MEM] = {ROOT: D(1)}  # type: ignore[index]
    with pytest.raises(TypeError):
        first[MEM][ROOT] = D(1)  # type: ignore[index]
    assert isinstance(first, dict)
    assert json.loads(json.dumps(first, default=str)) == {"mem": {"root": "10"}}
    for _ in range(3):
        m.free(second)
    assert m.allocatable() == {MEM: D(100)}


def test_a_grant_carries_the_maps_form_of_the_amount() -> None:
    m = mem_map()
    grant = m.allocate({MEM: D("2E+1")})
    assert grant == {"mem": {"root": D(20)}}
    assert str(grant[MEM][ROOT]) == "20"
    assert str(m.allocate({MEM: D("2E+1")})[MEM][ROOT]) == "20"


def test_an_equal_mapping_built_by_the_caller_is_checked_in_full() -> None:
    m = mem_map()
    m.allocate({MEM: D(30)})
    m.free({MEM: {ROOT: D(30)}})  # as restored from a ledger
    assert m.allocatable() == {MEM: D(100)}
    with pytest.raises(InvalidResourceArgument, match="only 0 allocated"):
        m.free({MEM: {ROOT: D(30)}})


def test_a_grant_of_another_map_is_checked_in_full() -> None:
    one, other = mem_map(), mem_map()
    grant = other.allocate({MEM: D(5)})
    with pytest.raises(InvalidResourceArgument, match="only 0 allocated"):
        one.free(grant)
    one.allocate({MEM: D(5)})
    one.free(grant)  # a valid grant for this map too: equal amounts on the same device
    assert one.allocatable() == {MEM: D(100)}


def test_a_freed_grant_beyond_what_is_held_is_refused_and_changes_nothing() -> None:
    m = mem_map()
    grant = m.allocate({MEM: D(40)})
    m.free(grant)
    with pytest.raises(InvalidResourceArgument, match="only 0 allocated"):
        m.free(grant)
    assert m.allocatable() == {MEM: D(100)}


def test_refusals_and_other_requests_still_take_the_general_path() -> None:
    m = mem_map()
    big = m.allocate({MEM: D(90)})
    m.allocate({MEM: D(5)})
    with pytest.raises(InsufficientResource) as err:
        m.allocate({MEM: D(90)}, context_tag="job")  # seen before, refused on the snapshot
    assert (err.value.requested, err.value.allocatable) == (D(90), D(5))
    assert str(err.value).startswith("[job] ")
    with pytest.raises(InsufficientResource):
        m.allocate({SlotName("cuda.device"): D(1)})
    with pytest.raises(InvalidResourceArgument):
        m.allocate({MEM: D(-1)})
    with pytest.raises(InvalidResourceArgument):
        m.allocate({MEM: D("sNaN")})
    assert m.allocate({MEM: D(0)}) == {}
    assert m.allocate({MEM: D(1), SlotName("cpu"): D(0)}) == {"mem": {"root": D(1)}}
    m.free(big)
    assert m.allocatable() == {MEM: D(94)}


def test_past_the_bound_grants_are_plain_and_still_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(onedevice, "CACHE_LIMIT", 3)
    m = mem_map(1000)
    grants = [m.allocate({MEM: D(n)}) for n in range(1, 11)]
    assert [g[MEM][ROOT] for g in grants] == [D(n) for n in range(1, 11)]
    assert sum(type(g) is dict for g in grants) == 7
    for g in grants:
        m.free(g)
    assert m.allocatable() == {MEM: D(1000)}


def test_a_deep_copy_of_a_grant_frees_like_the_grant() -> None:
    m = mem_map()
    grant = m.allocate({MEM: D(12)})
    m.free(copy.deepcopy(grant))
    assert m.allocatable() == {MEM: D(100)}


def test_threads_sharing_grants_never_take_more_than_there_is() -> None:
    m = mem_map(64)
    held: list[Decimal] = []
    lock = threading.Lock()

    def worker() -> None:
        for i in range(400):
            try:
                grant = m.allocate({MEM: D(1 + i % 4)})
            except InsufficientResource:
                continue
            with lock:
                held.append(grant[MEM][ROOT])
            if i % 3:
                m.free(grant)
                with lock:
                    held.remove(grant[MEM][ROOT])

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(held) <= 64
    assert m.allocatable() == {MEM: D(64) - sum(held, D(0))}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 40)), max_size=60))
def test_the_free_amount_is_capacity_less_what_is_held(steps: list[tuple[bool, int]]) -> None:
    m = mem_map()
    held: list[object] = []
    amounts: list[int] = []
    for alloc, n in steps:
        if alloc or not held:
            try:
                held.append(m.allocate({MEM: D(n)}))
                amounts.append(n)
            except InsufficientResource:
                assert sum(amounts) + n > 100
        else:
            j = n % len(held)
            m.free(held.pop(j))  # type: ignore[arg-type]
            amounts.pop(j)
        assert m.allocatable() == {MEM: D(100 - sum(amounts))}


def test_each_map_keeps_its_own_fast_path_state() -> None:
    # the fast functions read their state from a namespace of their map: two maps used in turn
    # never see each other's free amount, grants or refusals, and the module keeps none
    small, large = mem_map(10), mem_map(100)
    a = small.allocate({MEM: D(8)})
    b = large.allocate({MEM: D(8)})
    assert a is not b
    assert a == b
    with pytest.raises(InsufficientResource):
        small.allocate({MEM: D(8)})
    assert large.allocate({MEM: D(8)}) is b
    small.free(a)
    with pytest.raises(InvalidResourceArgument):
        small.free(b)  # large's grant: small checks it in full, and holds nothing now
    large.free(b)
    assert small.allocatable() == {MEM: D(10)}
    assert large.allocatable() == {MEM: D(92)}
    assert small.allocate.__globals__ is not large.allocate.__globals__
    assert small.allocate.__code__ is not large.allocate.__code__
    assert (onedevice.grant_of, onedevice.issued, onedevice.free) == ({}, {}, [])


def test_a_namespace_takes_only_names_its_functions_read() -> None:
    with pytest.raises(ValueError, match="not names of the module: sloot"):
        namespaced.copies(vars(onedevice), ("allocate",), {"sloot": MEM})
