"""The fast path of allocate and free hands everything unusual to the validating general path."""

from __future__ import annotations

import threading
from decimal import Decimal

import pytest

from accelkit.allocmap import AllocationStrategy, DiscretePropertyAllocMap, FractionAllocMap
from accelkit.allocmap.pool import OneDevicePool
from accelkit.errors import InsufficientResource, InvalidResourceArgument, refusal
from accelkit.types import DeviceId, DeviceSlotInfo, SlotName, SlotType

D = Decimal
S = SlotName("cuda.shares")


def gpus(n: int, cap: str = "1.0") -> dict[DeviceId, DeviceSlotInfo]:
    return {
        DeviceId(f"cuda{i}"): DeviceSlotInfo(SlotType.COUNT, S, D(cap), i % 2) for i in range(n)
    }


def test_a_bad_free_of_a_split_grant_changes_nothing() -> None:
    m = FractionAllocMap(gpus(2))
    held = m.allocate({S: D("1.5")})
    assert held == {S: {"cuda0": D("0.75"), "cuda1": D("0.75")}}
    before = m.allocations
    bad = [
        {S: {DeviceId("cuda0"): D("0.75"), DeviceId("cuda1"): D("0.8")}},  # more than held
        {S: {DeviceId("cuda0"): D("0.75"), DeviceId("cuda9"): D("0.75")}},  # unknown device
        {S: {DeviceId("cuda0"): D("0.75"), DeviceId("cuda1"): D("sNaN")}},
        {S: {DeviceId("cuda0"): D("0.75"), DeviceId("cuda1"): 0.75}},  # a float
        {S: D("1.5")},  # not a mapping of devices
    ]
    for alloc in bad:
        with pytest.raises(InvalidResourceArgument):
            m.free(alloc)  # type: ignore[arg-type]
        assert m.allocations == before
    m.free(held)
    assert m.allocatable() == {S: D("2.0")}


def test_a_bad_free_of_a_one_device_grant_changes_nothing() -> None:
    m = FractionAllocMap(gpus(2), strategy=AllocationStrategy.FILL)
    held = m.allocate({S: D("0.5")})
    before = m.allocations
    (dev,) = held[S]
    for alloc in ({S: {dev: D("0.6")}}, {S: {DeviceId("cuda7"): D("0.5")}}, {S: {dev: 1}}):
        with pytest.raises(InvalidResourceArgument):
            m.free(alloc)  # type: ignore[dict-item]
        assert m.allocations == before
    m.free(held)
    with pytest.raises(InvalidResourceArgument, match="only 0 allocated"):
        m.free(held)


def test_refusals_report_what_is_free_without_changing_anything() -> None:
    m = FractionAllocMap(gpus(2))
    m.allocate({S: D("1.5")})
    with pytest.raises(InsufficientResource) as err:
        m.allocate({S: D("0.6")}, context_tag="job")
    assert (err.value.requested, err.value.allocatable) == (D("0.6"), D("0.50"))
    assert str(err.value).startswith("[job] ")
    assert m.allocatable() == {S: D("0.50")}


def test_unique_requests_and_maps_of_several_slots_take_the_general_path() -> None:
    devices = {
        DeviceId("root"): DeviceSlotInfo(SlotType.BYTES, SlotName("mem"), D(100)),
        DeviceId("c0"): DeviceSlotInfo(SlotType.COUNT, SlotName("cpu"), D(1)),
        DeviceId("c1"): DeviceSlotInfo(SlotType.COUNT, SlotName("cpu"), D(1)),
        DeviceId("u0"): DeviceSlotInfo(SlotType.UNIQUE, SlotName("npu"), D(1)),
        DeviceId("u1"): DeviceSlotInfo(SlotType.UNIQUE, SlotName("npu"), D(1)),
    }
    m = DiscretePropertyAllocMap(devices)
    mem = m.allocate({SlotName("mem"): D(60)})
    assert mem == {"mem": {"root": D(60)}}
    assert m.allocatable()["mem"] == D(40)
    with pytest.raises(InvalidResourceArgument, match="request exactly 1"):
        m.allocate({SlotName("npu"): D(2)})
    npu = m.allocate({SlotName("npu"): D(1)})
    assert npu == {"npu": {"u0": D(1)}}
    with pytest.raises(InsufficientResource):
        m.allocate({SlotName("mem"): D(41)})
    m.free(mem)
    m.free(npu)
    assert m.allocatable() == {"mem": D(100), "cpu": D(2), "npu": D(2)}


def test_a_one_device_pool_keeps_its_free_amount_in_one_place() -> None:
    m = DiscretePropertyAllocMap(
        {DeviceId("root"): DeviceSlotInfo(SlotType.BYTES, SlotName("mem"), D(10))}
    )
    (pool,) = m._pools.values()
    assert isinstance(pool, OneDevicePool)
    a = m.allocate({SlotName("mem"): D(4)})
    pool.total_free = 999  # ignored: free[0] is the one record
    assert pool.total_free == pool.free[0] == 6
    m.free(a)
    assert m.allocatable() == {"mem": D(10)}


def test_threads_never_take_more_than_there_is() -> None:
    m = FractionAllocMap(gpus(4), strategy=AllocationStrategy.FILL)
    granted: list[Decimal] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(300):
            try:
                a = m.allocate({S: D("0.3")})
            except InsufficientResource:
                continue
            with lock:
                granted.append(sum(a[S].values()))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(granted) == D("0.3") * len(granted) <= D("4.0")
    assert len(granted) == 13  # 4 x 1.0 in shares of 0.3, some split: exactly 13 fit
    assert m.allocatable() == {S: D("4.0") - sum(granted)}


@pytest.mark.parametrize("context_tag", [None, "agent-1"])
def test_a_refusal_is_the_error_the_class_builds_field_for_field(context_tag: str | None) -> None:
    built = InsufficientResource(
        slot="cuda.shares", requested=D("1.5"), allocatable=D("0.25"), context_tag=context_tag
    )
    quick = refusal(InsufficientResource, "cuda.shares", D("1.5"), D("0.25"), context_tag)
    assert type(quick) is InsufficientResource
    for field in ("slot", "requested", "allocatable", "context_tag"):
        assert getattr(quick, field) == getattr(built, field), field
    assert quick.args == built.args == ("cuda.shares", D("1.5"), D("0.25"), context_tag)
    assert str(quick) == str(built)
    assert repr(quick) == repr(built)
    m = FractionAllocMap(gpus(2))
    with pytest.raises(InsufficientResource) as refused:
        m.allocate({S: D(3)}, context_tag=context_tag)
    assert str(refused.value) == str(
        InsufficientResource(slot=S, requested=D(3), allocatable=D("2.00"), context_tag=context_tag)
    )
