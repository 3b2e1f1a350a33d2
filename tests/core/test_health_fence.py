"""The fence around alloc maps without set_unavailable: fenced devices take no new grant."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelkit.allocmap import AbstractAllocMap, DiscretePropertyAllocMap, FractionAllocMap
from accelkit.config import load_host_config
from accelkit.config.model import AllocationMode
from accelkit.errors import InsufficientResource, ResourceError
from accelkit.node import Node
from accelkit.node.health_fence import FencedMap
from accelkit.types import (
    AgentId,
    DeviceAllocation,
    DeviceId,
    DeviceName,
    DeviceSlotInfo,
    SlotName,
    SlotType,
    Workload,
    WorkloadType,
)

D = Decimal
SHARES = SlotName("cuda.shares")
DEVICE = SlotName("cuda.device")


def slots(slot: SlotName, caps: list[str]) -> dict[DeviceId, DeviceSlotInfo]:
    return {
        DeviceId(f"cuda{i}"): DeviceSlotInfo(SlotType.COUNT, slot, D(c)) for i, c in enumerate(caps)
    }


def fraction(
    device_slots: Mapping[DeviceId, DeviceSlotInfo], mask: frozenset[DeviceId]
) -> AbstractAllocMap:
    return FractionAllocMap(device_slots, device_mask=mask, quantum_size=D("0.25"))


def discrete(
    device_slots: Mapping[DeviceId, DeviceSlotInfo], mask: frozenset[DeviceId]
) -> AbstractAllocMap:
    return DiscretePropertyAllocMap(device_slots, device_mask=mask)


def fenced(
    factory: Callable[[Mapping[DeviceId, DeviceSlotInfo], frozenset[DeviceId]], AbstractAllocMap],
    device_slots: dict[DeviceId, DeviceSlotInfo],
) -> FencedMap:
    return FencedMap(factory(device_slots, frozenset(device_slots)), factory)


def devices_of(grant: DeviceAllocation) -> set[str]:
    return {str(d) for per_device in grant.values() for d, a in per_device.items() if a}


def test_without_fenced_devices_it_is_the_wrapped_map() -> None:
    m = fenced(discrete, slots(DEVICE, ["1", "1"]))
    assert devices_of(m.allocate({DEVICE: D(2)})) == {"cuda0", "cuda1"}
    assert m.unavailable_devices == frozenset()


def test_fenced_devices_take_no_grant_and_are_named_when_only_they_could() -> None:
    m = fenced(discrete, slots(DEVICE, ["1", "1", "1"]))
    m.set_unavailable(frozenset({DeviceId("cuda1"), DeviceId("elsewhere")}))
    assert m.unavailable_devices == {DeviceId("cuda1")}  # not its device: ignored
    assert devices_of(m.allocate({DEVICE: D(2)})) == {"cuda0", "cuda2"}
    with pytest.raises(InsufficientResource, match=r"unhealthy or cordoned: cuda1") as refused:
        m.allocate({DEVICE: D(1)})
    assert refused.value.allocatable == 0
    m.set_unavailable(frozenset())
    assert devices_of(m.allocate({DEVICE: D(1)})) == {"cuda1"}


def test_frees_and_applies_on_fenced_devices_still_work() -> None:
    m = fenced(fraction, slots(SHARES, ["1", "1"]))
    held = m.allocate({SHARES: D("1.5")})
    m.set_unavailable(frozenset({DeviceId("cuda0")}))
    m.free(held)
    m.apply_allocation(held)
    assert m.inner.allocations[SHARES][DeviceId("cuda0")] > 0
    m.free(held)
    grant = m.allocate({SHARES: D("0.75")})
    assert devices_of(grant) == {"cuda1"}


def test_a_refused_request_changes_nothing() -> None:
    m = fenced(fraction, slots(SHARES, ["1", "1"]))
    m.allocate({SHARES: D("0.5")})
    m.set_unavailable(frozenset({DeviceId("cuda1")}))
    before = {s: dict(a) for s, a in m.inner.allocations.items()}
    with pytest.raises(InsufficientResource):
        m.allocate({SHARES: D("0.75")})
    assert {s: dict(a) for s, a in m.inner.allocations.items()} == before


operations = st.lists(
    st.one_of(
        st.tuples(st.just("allocate"), st.sampled_from(["0.25", "0.5", "1", "1.5", "2.25"])),
        st.tuples(st.just("free"), st.integers(0, 10)),
        st.tuples(st.just("fence"), st.sets(st.sampled_from(["cuda0", "cuda1", "cuda2"]))),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(operations)
def test_no_grant_ever_lands_on_a_device_fenced_at_the_time(
    steps: list[tuple[str, object]],
) -> None:
    m = fenced(fraction, slots(SHARES, ["1", "1", "1"]))
    held: list[DeviceAllocation] = []
    fence: set[str] = set()
    for op, arg in steps:
        if op == "fence":
            fence = set(arg)  # type: ignore[call-overload]
            m.set_unavailable(frozenset(DeviceId(d) for d in fence))
        elif op == "allocate":
            try:
                grant = m.allocate({SHARES: D(str(arg))})
            except ResourceError:
                continue
            assert not devices_of(grant) & fence
            assert sum(grant[SHARES].values()) == D(str(arg))
            held.append(grant)
        elif held:
            m.free(held.pop(int(str(arg)) % len(held)))
    total = sum((sum(g[SHARES].values()) for g in held), D(0))
    assert sum(m.inner.allocations[SHARES].values()) == total


def test_in_split_mode_each_agents_own_map_is_fenced(mock_node: Callable[..., Path]) -> None:
    config = load_host_config(mock_node(cpus=2, gpus=2)).with_mode(AllocationMode.AUTO_SPLIT)
    config = config.with_agent_count(2)

    async def main() -> None:
        async with Node.open(config) as node:
            owner = {
                str(d): agent
                for agent, view in node.agents.items()
                for d in view.device_ids()[DeviceName("cuda")]
            }
            await node.health_keeper.cordon("cuda", "cuda1", "split test")
            with pytest.raises(InsufficientResource, match="cuda1"):
                await node.book(
                    owner["cuda1"], Workload("a", WorkloadType.PROCESS_TREE), {DEVICE: D(1)}
                )
            record = await node.book(
                owner["cuda0"], Workload("b", WorkloadType.PROCESS_TREE), {DEVICE: D(1)}
            )
            assert list(record.allocation[DeviceName("cuda")][DEVICE]) == ["cuda0"]
            await node.health_keeper.uncordon("cuda", "cuda1")
            await node.book(
                AgentId(owner["cuda1"]), Workload("c", WorkloadType.PROCESS_TREE), {DEVICE: D(1)}
            )

    asyncio.run(main())
