"""NUMA affinity hints on both map kinds."""

from __future__ import annotations

from decimal import Decimal

import attrs
import pytest

from accelkit.allocmap import (
    AffinityHint,
    AffinityPolicy,
    AllocationStrategy,
    DiscretePropertyAllocMap,
    FractionAllocMap,
)
from accelkit.types import DeviceId, DeviceSlotInfo, SlotName, SlotType

D = Decimal
SINGLE, INTERLEAVED = AffinityPolicy.PREFER_SINGLE_NODE, AffinityPolicy.INTERLEAVED
CPU = SlotName("cpu")


def cores(per_node: list[int], cap: int = 1) -> dict[DeviceId, DeviceSlotInfo]:
    out = {}
    i = 0
    for node, count in enumerate(per_node):
        for _ in range(count):
            out[DeviceId(str(i))] = DeviceSlotInfo(SlotType.COUNT, CPU, D(cap), node)
            i += 1
    return out


def nodes_of(
    m: DiscretePropertyAllocMap | FractionAllocMap, alloc: object
) -> dict[int | None, Decimal]:
    per_node: dict[int | None, Decimal] = {}
    for _slot, per_dev in alloc.items():  # type: ignore[attr-defined]
        for dev, amount in per_dev.items():
            node = m.device_slots[dev].numa_node
            per_node[node] = per_node.get(node, D(0)) + amount
    return per_node


def test_hint_is_a_frozen_value() -> None:
    hint = AffinityHint(SINGLE, [1, 0])
    assert hint.numa_nodes == frozenset({0, 1})
    assert AffinityHint("interleaved").policy is INTERLEAVED
    assert AffinityHint(SINGLE).numa_nodes == frozenset()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        hint.policy = INTERLEAVED  # type: ignore[misc]
    with pytest.raises(ValueError, match="sideways"):
        AffinityHint("sideways")


@pytest.mark.parametrize("strategy", list(AllocationStrategy))
def test_prefer_single_node_keeps_a_request_on_one_node(strategy: AllocationStrategy) -> None:
    m = DiscretePropertyAllocMap(cores([4, 4]), strategy=strategy)
    hint = AffinityHint(SINGLE)
    a = m.allocate({CPU: D(3)}, affinity_hint=hint)
    assert nodes_of(m, a) == {0: 3}
    # Node 0 has 1 left, node 1 has 4: a request of 2 goes to node 1 whole, not 1 + 1.
    b = m.allocate({CPU: D(2)}, affinity_hint=hint)
    assert nodes_of(m, b) == {1: 2}
    # Best fit: 1 goes to the node with the least room that holds it (node 0).
    c = m.allocate({CPU: D(1)}, affinity_hint=hint)
    assert nodes_of(m, c) == {0: 1}


def test_prefer_single_node_spills_over_to_the_fewest_nodes() -> None:
    m = DiscretePropertyAllocMap(cores([2, 4, 3]))
    a = m.allocate({CPU: D(6)}, affinity_hint=AffinityHint(SINGLE))
    assert nodes_of(m, a) == {1: 4, 2: 2}


def test_without_a_hint_numa_is_ignored() -> None:
    m = DiscretePropertyAllocMap(cores([4, 4]), strategy=AllocationStrategy.FILL)
    m.allocate({CPU: D(3)})
    a = m.allocate({CPU: D(2)})
    assert nodes_of(m, a) == {0: 1, 1: 1}


@pytest.mark.parametrize("strategy", list(AllocationStrategy))
def test_interleaved_spreads_across_nodes(strategy: AllocationStrategy) -> None:
    m = DiscretePropertyAllocMap(cores([4, 4]), strategy=strategy)
    a = m.allocate({CPU: D(4)}, affinity_hint=AffinityHint(INTERLEAVED))
    assert nodes_of(m, a) == {0: 2, 1: 2}
    b = m.allocate({CPU: D(3)}, affinity_hint=AffinityHint(INTERLEAVED))
    assert nodes_of(m, b) == {0: 2, 1: 1}


def test_interleaved_as_evenly_as_the_nodes_allow() -> None:
    m = DiscretePropertyAllocMap(cores([1, 4, 4]))
    a = m.allocate({CPU: D(7)}, affinity_hint=AffinityHint(INTERLEAVED))
    assert nodes_of(m, a) == {0: 1, 1: 3, 2: 3}


@pytest.mark.parametrize("policy", list(AffinityPolicy))
def test_hinted_nodes_are_used_first(policy: AffinityPolicy) -> None:
    m = DiscretePropertyAllocMap(cores([4, 4, 4]))
    a = m.allocate({CPU: D(3)}, affinity_hint=AffinityHint(policy, frozenset({2})))
    assert nodes_of(m, a) == {2: 3}


def test_hinted_nodes_give_all_they_have_before_spilling_over() -> None:
    m = DiscretePropertyAllocMap(cores([4, 4, 4]))
    a = m.allocate({CPU: D(6)}, affinity_hint=AffinityHint(SINGLE, frozenset({1})))
    assert nodes_of(m, a) == {1: 4, 0: 2}


def test_several_hinted_nodes_follow_the_policy_among_themselves() -> None:
    m = DiscretePropertyAllocMap(cores([4, 4, 4]))
    a = m.allocate({CPU: D(4)}, affinity_hint=AffinityHint(INTERLEAVED, frozenset({0, 2})))
    assert nodes_of(m, a) == {0: 2, 2: 2}
    b = m.allocate({CPU: D(2)}, affinity_hint=AffinityHint(SINGLE, frozenset({0, 2})))
    assert nodes_of(m, b) in ({0: 2}, {2: 2})


def test_hint_naming_absent_nodes_falls_back_to_the_others() -> None:
    m = DiscretePropertyAllocMap(cores([2, 2]))
    a = m.allocate({CPU: D(2)}, affinity_hint=AffinityHint(SINGLE, frozenset({7})))
    assert len(nodes_of(m, a)) == 1


def test_devices_without_a_numa_node() -> None:
    devices = {
        DeviceId("a"): DeviceSlotInfo(SlotType.COUNT, CPU, D(2), None),
        DeviceId("b"): DeviceSlotInfo(SlotType.COUNT, CPU, D(2), 0),
    }
    m = DiscretePropertyAllocMap(devices)
    a = m.allocate({CPU: D(2)}, affinity_hint=AffinityHint(SINGLE))
    one_node: list[dict[int | None, Decimal]] = [{0: D(2)}, {None: D(2)}]
    assert nodes_of(m, a) in one_node
    b = m.allocate({CPU: D(2)}, affinity_hint=AffinityHint(INTERLEAVED))
    assert sum(nodes_of(m, b).values()) == 2


def gpus_on_two_nodes(**kw: object) -> FractionAllocMap:
    devices = {
        DeviceId(f"cuda{i}"): DeviceSlotInfo(
            SlotType.COUNT, SlotName("cuda.shares"), D("1.0"), i // 2
        )
        for i in range(4)
    }
    return FractionAllocMap(devices, **kw)  # type: ignore[arg-type]


def test_fraction_single_device_rule_beats_interleaving() -> None:
    m = gpus_on_two_nodes()
    a = m.allocate({SlotName("cuda.shares"): D("0.5")}, affinity_hint=AffinityHint(INTERLEAVED))
    assert len(a[SlotName("cuda.shares")]) == 1


def test_fraction_interleaved_split_across_nodes() -> None:
    m = gpus_on_two_nodes()
    a = m.allocate({SlotName("cuda.shares"): D("1.5")}, affinity_hint=AffinityHint(INTERLEAVED))
    assert nodes_of(m, a) == {0: D("0.75"), 1: D("0.75")}


def test_fraction_prefer_single_node() -> None:
    m = gpus_on_two_nodes()
    a = m.allocate({SlotName("cuda.shares"): D("1.5")}, affinity_hint=AffinityHint(SINGLE))
    assert nodes_of(m, a) == {0: D("1.5")}
    b = m.allocate(
        {SlotName("cuda.shares"): D("0.5")}, affinity_hint=AffinityHint(SINGLE, frozenset({1}))
    )
    assert nodes_of(m, b) == {1: D("0.5")}


def test_fraction_affinity_yields_to_the_fragmentation_guard() -> None:
    m = gpus_on_two_nodes(allow_fragmentation=False)
    # Node 1 has 0.2 + 0.2 free; node 0 is empty.
    m.apply_allocation(
        {SlotName("cuda.shares"): {DeviceId("cuda2"): D("0.8"), DeviceId("cuda3"): D("0.8")}}
    )
    hint = AffinityHint(SINGLE, frozenset({1}))
    a = m.allocate({SlotName("cuda.shares"): D("1.0")}, affinity_hint=hint)
    assert len(a[SlotName("cuda.shares")]) == 1
