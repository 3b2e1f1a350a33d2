"""AUTO_SPLIT per slot type and NUMA-aware split (DESIGN §6), and the plan's NUMA view."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from accelkit.config import AgentConfig, AllocationMode, ResourceConfig
from accelkit.partition import GlobalDeviceInfo, ResourcePartitioner
from accelkit.plugin import PluginRole
from accelkit.types import AgentId, ComputeDevice, DeviceId, DeviceName, DeviceSlotInfo

CPU, CUDA = DeviceName("cpu"), DeviceName("cuda")


def role_of(key: str) -> PluginRole:
    """The roles the shipped cpu and mem plugins declare; every other key an accelerator."""
    return {"cpu": PluginRole.CORES, "mem": PluginRole.MEMORY}.get(key, PluginRole.ACCELERATOR)


def plugin(key: str, devices: list[tuple[str, str, int | None]]) -> GlobalDeviceInfo:
    """``devices`` as (id, slot, NUMA node)."""
    computed = [ComputeDevice(DeviceName(key), DeviceId(i), "t", n, 0, 1) for i, _, n in devices]
    slots = {DeviceId(i): DeviceSlotInfo("count", s, 1, n) for i, s, n in devices}
    return GlobalDeviceInfo(DeviceName(key), computed, slots, role=role_of(key))


def cores(per_node: list[int]) -> GlobalDeviceInfo:
    ids, n = [], 0
    for node, count in enumerate(per_node):
        for _ in range(count):
            ids.append((str(n), "cpu", node))
            n += 1
    return plugin("cpu", ids)


def split(node: dict[str, GlobalDeviceInfo], agents: int, *, numa: bool = False, **kw):
    config = ResourceConfig(
        allocation_mode=AllocationMode.AUTO_SPLIT, numa_aware_split=numa, reserved_cpu=0, **kw
    )
    ids = [AgentConfig(AgentId(f"agent-{i + 1}")) for i in range(agents)]
    return ResourcePartitioner(node, config).partition(ids)


def ids_of(result, agent: str, name: DeviceName = CUDA) -> tuple[str, ...]:
    return result.assignments[AgentId(agent)][name].device_ids


def test_whole_cards_and_partitions_are_split_on_their_own():
    whole = [(f"cuda{i}", "cuda.device", 0) for i in range(3)]
    mig = [(f"cuda3-mig{i}", "cuda.mig-1g", 0) for i in range(2)]
    result = split({"cpu": cores([4]), "cuda": plugin("cuda", whole + mig)}, 2)
    a1, a2 = ids_of(result, "agent-1"), ids_of(result, "agent-2")
    assert a1 == ("cuda0", "cuda1", "cuda3-mig0")
    assert a2 == ("cuda2", "cuda3-mig1")  # whole cards and partitions on both agents
    # the agents that get one more rotate between slot types: 3+3 over 2 is 3 and 3
    mig.append(("cuda3-mig2", "cuda.mig-1g", 0))
    result = split({"cpu": cores([4]), "cuda": plugin("cuda", whole + mig)}, 2)
    assert len(ids_of(result, "agent-1")) == len(ids_of(result, "agent-2")) == 3


def test_one_slot_type_without_numa_awareness_is_fill_from_front():
    cuda = plugin("cuda", [(f"cuda{i}", "cuda.device", i % 2) for i in range(5)])
    result = split({"cpu": cores([3, 3]), "cuda": cuda}, 3)
    assert [ids_of(result, f"agent-{i}") for i in (1, 2, 3)] == [
        ("cuda0", "cuda1"),
        ("cuda2", "cuda3"),
        ("cuda4",),
    ]


def test_numa_aware_split_keeps_agents_on_one_node_with_their_cores():
    # GPUs alternate between the nodes; cores 0-3 on node 0, 4-7 on node 1
    cuda = plugin("cuda", [(f"cuda{i}", "cuda.device", i % 2) for i in range(4)])
    node = {"cpu": cores([4, 4]), "cuda": cuda}
    plain = split(node, 2)
    assert plain.numa_nodes == {"agent-1": (0, 1), "agent-2": (0, 1)}
    assert plain.warnings == (
        "agent 'agent-1': accelerators on NUMA node(s) 1, but its cpu cores on 0",
        "agent 'agent-2': accelerators on NUMA node(s) 0, but its cpu cores on 1",
    )
    aware = split(node, 2, numa=True)
    assert ids_of(aware, "agent-1") == ("cuda0", "cuda2")
    assert ids_of(aware, "agent-1", CPU) == ("0", "1", "2", "3")
    assert ids_of(aware, "agent-2") == ("cuda1", "cuda3")
    assert ids_of(aware, "agent-2", CPU) == ("4", "5", "6", "7")
    assert aware.numa_nodes == {"agent-1": (0,), "agent-2": (1,)}
    assert aware.warnings == ()


def test_numa_aware_split_warns_when_an_agent_must_span_nodes():
    # 7 GPUs, 5 on node 0 and 2 on node 1, over 2 agents: 4 fit on node 0, the other 3 cannot
    # sit on one node
    cuda = plugin("cuda", [(f"cuda{i}", "cuda.device", 0 if i < 5 else 1) for i in range(7)])
    result = split({"cpu": cores([2, 2]), "cuda": cuda}, 2, numa=True)
    assert ids_of(result, "agent-1") == ("cuda0", "cuda1", "cuda2", "cuda3")
    assert ids_of(result, "agent-2") == ("cuda4", "cuda5", "cuda6")
    assert ids_of(result, "agent-2", CPU) == ("2", "3")  # the node of most of its GPUs
    assert result.numa_nodes == {"agent-1": (0,), "agent-2": (0, 1)}
    assert result.warnings == (
        "agent 'agent-2': accelerators on NUMA node(s) 0, but its cpu cores on 1",
    )
    # without cpu cores to compare with, the span itself is the warning
    result = split({"cuda": cuda}, 2, numa=True)
    assert result.warnings == ("agent 'agent-2' spans NUMA nodes 0, 1",)


def test_shared_mode_shows_nodes_without_warning():
    cuda = plugin("cuda", [(f"cuda{i}", "cuda.device", i % 2) for i in range(4)])
    config = ResourceConfig(allocation_mode=AllocationMode.SHARED, reserved_cpu=0)
    agents = [AgentConfig(AgentId("a")), AgentConfig(AgentId("b"))]
    result = ResourcePartitioner({"cpu": cores([2, 2]), "cuda": cuda}, config).partition(agents)
    assert result.numa_nodes == {"a": (0, 1), "b": (0, 1)}
    assert result.warnings == ()


@st.composite
def numa_nodes_and_agents(draw):
    per_node = draw(st.lists(st.integers(0, 6), min_size=1, max_size=4))
    types = draw(
        st.sets(st.sampled_from(["cuda.device", "cuda.mig-1g", "cuda.mig-3g"]), min_size=1)
    )
    devices = []
    for node, count in enumerate(per_node):
        for k in range(count):
            devices.append((f"cuda{node}-{k}", draw(st.sampled_from(sorted(types))), node))
    return per_node, devices, draw(st.integers(2, 6)), draw(st.booleans())


@settings(max_examples=150, deadline=None)
@given(numa_nodes_and_agents())
def test_split_invariants(case):
    per_node, devices, agents, numa = case
    node = {"cpu": cores([3] * len(per_node)), "cuda": plugin("cuda", devices)}
    result = split(node, agents, numa=numa)
    slot_of = {i: s for i, s, _ in devices}
    node_of = {i: n for i, _, n in devices}
    held = [d for a in result.assignments.values() for d in a[CUDA].device_ids]
    assert sorted(held) == sorted(slot_of)  # every device exactly once
    for slot in set(slot_of.values()):
        counts = [
            sum(slot_of[d] == slot for d in a[CUDA].device_ids) for a in result.assignments.values()
        ]
        assert max(counts) - min(counts) <= 1
    totals = [len(a[CUDA].device_ids) for a in result.assignments.values()]
    assert max(totals) - min(totals) <= 1
    if not numa:
        return
    if len(set(slot_of.values())) != 1:
        return
    # One slot type: if every node holds a multiple of an even count, one node each; and
    # the first agent served (the largest count) spans the fewest nodes that can hold it.
    sizes = {len(a[CUDA].device_ids) for a in result.assignments.values()}
    if len(sizes) == 1 and (q := sizes.pop()) and all(c % q == 0 for c in per_node):
        for a in result.assignments.values():
            assert len({node_of[d] for d in a[CUDA].device_ids}) == 1
    first = result.assignments[AgentId("agent-1")][CUDA].device_ids
    biggest = sorted(Counter(node_of.values()).values(), reverse=True)
    need = next(k for k in range(len(biggest) + 1) if sum(biggest[:k]) >= len(first))
    assert len({node_of[d] for d in first}) == need
