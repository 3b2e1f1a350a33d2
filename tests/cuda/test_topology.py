"""NVLink- and PCIe-aware placement of whole GPUs, over a fake NVML that models an 8-GPU
NVSwitch board and a node of two 4-GPU NVLink islands cutting across its NUMA nodes."""

from __future__ import annotations

import asyncio
import json
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelkit.allocmap import AffinityHint, AffinityPolicy, DiscretePropertyAllocMap
from accelkit.errors import InsufficientResource
from accelkit.types import Workload, WorkloadType
from accelkit_cuda.placement import TopologyAllocMap
from accelkit_cuda.topology import NUMA, NVLINK, PCIE_SWITCH, SYSTEM, Topology, choose

from . import fake_nvml as fk
from . import fake_topology as ft
from .support import run
from .test_node_health import AGENT, node_over

ISLANDS = [{f"cuda{i}" for i in island} for island in ft.ISLANDS]


def alloc_map(plugin):
    devices = plugin.devices
    return plugin.create_alloc_map(
        plugin.device_slots(devices), frozenset(d.device_id for d in devices)
    )


def gpus(amount: int) -> dict:
    return {"cuda.device": Decimal(amount)}


def granted(alloc) -> set[str]:
    return set(alloc["cuda.device"])


def test_the_two_island_node_reads_as_two_islands(start):
    plugin = start(ft.two_island_node())
    topology = plugin.topology
    assert topology is not None
    assert topology.level("cuda0", "cuda4") == NVLINK  # across NUMA nodes, one island
    assert topology.level("cuda2", "cuda3") == NVLINK  # island B (and one switch)
    assert topology.pcie[frozenset(("cuda2", "cuda3"))] == PCIE_SWITCH
    assert topology.level("cuda0", "cuda2") == NUMA  # NUMA node 0, other switch, no NVLink
    assert topology.level("cuda0", "cuda6") == SYSTEM
    assert [set(g) for g in topology.groups(NVLINK)] == ISLANDS
    info = run(plugin.get_node_info())
    assert info.facts["topology"] == (
        "NVLink: cuda0,cuda1,cuda4,cuda5 | cuda2,cuda3,cuda6,cuda7; "
        "PCIe switch: cuda0,cuda1 | cuda2,cuda3 | cuda4,cuda5 | cuda6,cuda7; "
        "NUMA node: cuda0,cuda1,cuda2,cuda3 | cuda4,cuda5,cuda6,cuda7"
    )


def test_a_link_naming_its_far_end_in_the_legacy_form_joins_that_gpu(start):
    made = [fk.FakeGpu(i, bus_id=f"00000000:{0xB0 + i:02X}:00.0", numa_node=0) for i in range(4)]
    for a, b in ((0, 1), (2, 3)):  # the far end as ``busIdLegacy`` writes it: 0000:B1:00.0
        made[a].nvlinks = [(f"0000:{made[b].bus_id[9:]}", ft.NVML_NVLINK_DEVICE_TYPE_GPU)]
        made[b].nvlinks = [(f"0000:{made[a].bus_id[9:]}", ft.NVML_NVLINK_DEVICE_TYPE_GPU)]
    topology = start(made).topology
    assert topology is not None
    assert topology.groups(NVLINK) == [["cuda0", "cuda1"], ["cuda2", "cuda3"]]


def test_a_four_gpu_grant_lands_on_one_island(start):
    plugin = start(ft.two_island_node())
    taken = alloc_map(plugin)
    assert isinstance(taken, TopologyAllocMap)
    first = granted(taken.allocate(gpus(4)))
    second = granted(taken.allocate(gpus(4)))
    assert first in ISLANDS
    assert second in ISLANDS
    assert first != second
    # the standard map, NUMA-aware only, splits the islands: what the topology map fixes
    plain = DiscretePropertyAllocMap(
        plugin.device_slots(plugin.devices), slot_specs=plugin.configurable_slots()
    )
    numa = AffinityHint(AffinityPolicy.PREFER_SINGLE_NODE)
    assert granted(plain.allocate(gpus(4), affinity_hint=numa)) not in ISLANDS


def test_small_grants_keep_an_island_whole_for_a_large_one(start):
    taken = alloc_map(start(ft.two_island_node()))
    one = granted(taken.allocate(gpus(1)))
    two = granted(taken.allocate(gpus(2)))
    island = next(i for i in ISLANDS if one <= i)
    assert two <= island  # the partly used island takes the next small grant too
    assert granted(taken.allocate(gpus(4))) == next(i for i in ISLANDS if i != island)


def test_a_grant_larger_than_an_island_takes_a_whole_island_first(start):
    taken = alloc_map(start(ft.two_island_node()))
    got = granted(taken.allocate(gpus(6)))
    assert any(i <= got for i in ISLANDS)


def test_an_nvswitch_board_is_one_island(start):
    plugin = start(ft.nvswitch_node())
    assert plugin.topology is not None
    assert [len(g) for g in plugin.topology.groups(NVLINK)] == [8]
    assert (
        run(plugin.get_node_info())
        .facts["topology"]
        .startswith(
            "NVLink: cuda0,cuda1,cuda2,cuda3,cuda4,cuda5,cuda6,cuda7; PCIe switch: cuda0,cuda1 |"
        )
    )
    taken = alloc_map(plugin)
    assert len(granted(taken.allocate(gpus(8)))) == 8


def test_without_nvlink_a_pcie_switch_then_a_numa_node_is_preferred(start):
    node = [fk.FakeGpu(i, numa_node=i // 4, pcie_switch=f"sw{i // 2}") for i in range(8)]
    taken = alloc_map(start(node))
    taken.allocate(gpus(1))  # cuda0: its switch mate cuda1 is then the lone GPU of a switch
    assert granted(taken.allocate(gpus(2))) in ({"cuda2", "cuda3"}, {"cuda4", "cuda5"})
    assert granted(taken.allocate(gpus(1))) == {"cuda1"}  # best fit: the half-used switch
    got = granted(taken.allocate(gpus(4)))
    assert len({int(d[4:]) // 4 for d in got}) == 1  # one NUMA node


def test_gpus_whose_topology_nvml_does_not_tell_get_the_standard_map(start):
    plugin = start(fk.gpus(4))  # no NUMA node, no switch, no NVLink: a VM
    assert plugin.topology is None
    assert "topology" not in run(plugin.get_node_info()).facts
    assert type(alloc_map(plugin)) is DiscretePropertyAllocMap


def test_a_link_that_is_down_joins_nothing(start):
    node = ft.two_island_node()
    for gpu in node:
        gpu.nvlinks_down = set(range(len(gpu.nvlinks)))
    plugin = start(node)
    assert plugin.topology is not None
    assert all(len(g) == 1 for g in plugin.topology.groups(NVLINK))


def test_an_nvml_error_on_a_gpus_links_leaves_it_without_nvlink(start):
    node = ft.two_island_node()
    node[0].errors["nvmlDeviceGetNvLinkState"] = fk.NVML_ERROR_UNKNOWN
    plugin = start(node)
    assert plugin.topology is not None
    assert plugin.topology.level("cuda1", "cuda4") == NVLINK
    # cuda0's peers still name it at their end of the links
    assert plugin.topology.level("cuda0", "cuda1") == NVLINK


def test_unavailable_gpus_are_passed_over(start):
    taken = alloc_map(start(ft.two_island_node()))
    taken.set_unavailable(frozenset({"cuda0"}))
    assert granted(taken.allocate(gpus(4))) == ISLANDS[1]
    with pytest.raises(InsufficientResource):
        taken.allocate(gpus(4))  # 3 left on island A: the standard map refuses, in its words


def test_a_numa_hint_breaks_ties_only(start):
    taken = alloc_map(start(ft.two_island_node()))
    hint = AffinityHint(AffinityPolicy.PREFER_SINGLE_NODE, numa_nodes=[1])
    assert granted(taken.allocate(gpus(2), affinity_hint=hint)) == {"cuda4", "cuda5"}


def test_requests_the_topology_does_not_shape_go_to_the_standard_map(start):
    taken = alloc_map(start(ft.two_island_node()))
    with pytest.raises(InsufficientResource):
        taken.allocate(gpus(9))
    with pytest.raises(Exception, match="whole"):
        taken.allocate({"cuda.device": Decimal("1.5")})
    assert taken.allocate({"cuda.device": Decimal(0)}) == {}


def test_a_node_books_four_gpus_on_one_island(tmp_path: Path, sysfs: Path) -> None:
    nvml = fk.FakeNVML(ft.two_island_node())

    async def main() -> list[set[str]]:
        async with node_over(tmp_path, nvml, sysfs) as node:
            found = []
            for name in ("a", "b"):
                workload = Workload(name, WorkloadType.PROCESS_TREE)
                record = await node.book(AGENT, workload, gpus(4))
                found.append(set(record.allocation["cuda"]["cuda.device"]))
            return found

    first, second = asyncio.run(main())
    assert first in ISLANDS
    assert second in ISLANDS


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 3), min_size=2, max_size=9).flatmap(
        lambda groups: st.tuples(
            st.just(groups), st.sets(st.integers(0, len(groups) - 1)), st.integers(1, len(groups))
        )
    )
)
def test_choose_gives_distinct_free_gpus_spanning_the_lowest_level_it_can(case):
    groups, taken, count = case
    devices = tuple(f"cuda{i}" for i in range(len(groups)))
    # GPUs with the same number share an island; pairs of islands share a NUMA node
    levels = {
        frozenset((a, b)): NVLINK
        if groups[i] == groups[j]
        else NUMA
        if groups[i] // 2 == groups[j] // 2
        else SYSTEM
        for i, a in enumerate(devices)
        for j, b in enumerate(devices)
        if i < j
    }
    topology = Topology(devices, levels)
    free = [d for i, d in enumerate(devices) if i not in taken]
    got = choose(topology, free, count)
    assert len(got) == min(count, len(free))
    assert len(set(got)) == len(got)
    assert set(got) <= set(free)
    # the grant spans no wider a level than the lowest one at which some group holds it
    if count <= len(free):
        lowest = min(
            level
            for level in (NVLINK, NUMA, SYSTEM)
            if any(len(g) >= count for g in topology.groups(level, free))
        )
        widest = max((topology.level(a, b) for a in got for b in got), default=NVLINK)
        assert widest <= lowest


def test_plan_shows_the_topology(tmp_path, sysfs, monkeypatch, capsys):
    from accelkit.cli.app import main
    from accelkit.discovery import PluginLoader

    from .test_identity import _FakeCUDA

    config = tmp_path / "host.toml"
    config.write_text(
        f'[resource]\nstate-dir = "{tmp_path / "state"}"\n[plugins]\nallowed = ["cuda"]\n'
    )

    def loader(selection=None):
        made = PluginLoader(selection)
        made.register(_FakeCUDA(fk.FakeNVML(ft.two_island_node()), sysfs), "cuda")
        made.build()
        return made

    monkeypatch.setattr(PluginLoader, "from_entry_points", loader)
    assert main(["plan", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "topology cuda: NVLink: cuda0,cuda1,cuda4,cuda5 | cuda2,cuda3,cuda6,cuda7;" in out
    assert main(["plan", "--config", str(config), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["topology"]["cuda"].startswith("NVLink: cuda0,cuda1,cuda4,cuda5 |")


def test_a_choice_beaten_to_a_gpu_falls_back_to_the_standard_map(start, monkeypatch):
    taken = alloc_map(start(ft.two_island_node()))
    first = granted(taken.allocate(gpus(1)))
    # another caller took the GPU between the choice and the booking
    monkeypatch.setattr(taken, "_close_gpus", lambda slots, hint: sorted(first))
    second = granted(taken.allocate(gpus(1)))
    assert second != first
    assert sum(taken.allocations["cuda.device"].values()) == 2


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-3, 8), max_size=20))
def test_grants_and_frees_never_book_a_gpu_twice(steps):
    from accelkit.types import ComputeDevice

    devices = [
        ComputeDevice("cuda", f"cuda{i}", f"bus{i}", i // 4, 1, 1, "GPU", f"GPU-{i}")
        for i in range(8)
    ]
    levels = {
        frozenset((a.device_id, b.device_id)): NVLINK
        if any({i, j} <= set(island) for island in ft.ISLANDS)
        else SYSTEM
        for i, a in enumerate(devices)
        for j, b in enumerate(devices)
        if i < j
    }
    from accelkit.types import DeviceSlotInfo

    slots = {d.device_id: DeviceSlotInfo("count", "cuda.device", 1, d.numa_node) for d in devices}
    taken = TopologyAllocMap(slots, topology=Topology(tuple(slots), levels))
    held: list[dict] = []
    for step in steps:
        if step <= 0 and held:
            taken.free(held.pop(step % len(held)))
        elif step > 0:
            try:
                held.append(taken.allocate(gpus(step)))
            except InsufficientResource:
                assert step > 8 - sum(len(h["cuda.device"]) for h in held)
        used = [d for h in held for d in h["cuda.device"]]
        assert len(used) == len(set(used))  # no GPU booked twice
        assert taken.allocations["cuda.device"] == {d: Decimal(d in used) for d in slots}
