"""Invariants of a repartition's plan for one slot type (hypothesis): every device placed once,
held devices never move, the counts are the even split's, devices stay where they can."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelkit.errors import InvalidResourceArgument
from accelkit.node.repartition import plan_slot_type
from accelkit.partition import distribute_devices
from accelkit.types import AgentId, DeviceId


@st.composite
def situations(
    draw: st.DrawFn,
) -> tuple[dict[AgentId, list[DeviceId]], list[DeviceId], frozenset[DeviceId]]:
    devices = [DeviceId(f"gpu{i}") for i in range(draw(st.integers(0, 12)))]
    agents = [AgentId(f"agent-{i}") for i in range(1, draw(st.integers(1, 4)) + 1)]
    owner = [draw(st.sampled_from([None, *agents])) for _ in devices]
    current = {a: [d for d, o in zip(devices, owner, strict=True) if o == a] for a in agents}
    pool = [d for d, o in zip(devices, owner, strict=True) if o is None]
    assigned = [d for d, o in zip(devices, owner, strict=True) if o is not None]
    held = frozenset(draw(st.lists(st.sampled_from(assigned), unique=True)) if assigned else [])
    return current, pool, held


@given(situations())
def test_a_plan_places_each_device_once_and_never_moves_a_held_one(
    situation: tuple[dict[AgentId, list[DeviceId]], list[DeviceId], frozenset[DeviceId]],
) -> None:
    current, pool, held = situation
    everything = [d for ids in current.values() for d in ids] + pool
    counts = {a: len(ids) for a, ids in distribute_devices(everything, list(current)).items()}
    if any(len([d for d in current[a] if d in held]) > counts[a] for a in current):
        with pytest.raises(InvalidResourceArgument, match="would give up a device"):
            plan_slot_type(current, pool, held)
        return
    after = plan_slot_type(current, pool, held)
    placed = [d for ids in after.values() for d in ids]
    assert sorted(placed) == sorted(everything)  # each device exactly once
    assert {a: len(ids) for a, ids in after.items()} == counts  # the even split's counts
    for agent, ids in current.items():
        assert {d for d in ids if d in held} <= set(after[agent])  # held devices stay
        kept = len(set(ids) & set(after[agent]))
        assert kept == min(len(ids), counts[agent])  # nothing moves that need not


def test_the_refusal_names_the_agent_and_its_held_devices() -> None:
    current = {AgentId("a"): [DeviceId("g0"), DeviceId("g1")], AgentId("b"): []}
    with pytest.raises(InvalidResourceArgument, match=r"agent 'a' .*g0, g1 are held"):
        plan_slot_type(current, [], frozenset({DeviceId("g0"), DeviceId("g1")}))


def test_an_unassigned_device_a_workload_holds_is_given_to_nobody() -> None:
    """Booked under another partition, it waits unassigned until its workload ends."""
    current = {AgentId("a"): [DeviceId("g0")], AgentId("b"): []}
    after = plan_slot_type(current, [DeviceId("g1"), DeviceId("g2")], frozenset({DeviceId("g1")}))
    assert after == {AgentId("a"): [DeviceId("g0")], AgentId("b"): [DeviceId("g2")]}
