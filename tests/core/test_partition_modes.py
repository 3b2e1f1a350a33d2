"""ResourcePartitioner in SHARED, AUTO_SPLIT and MANUAL mode over hand-built device maps."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelkit.config import AgentConfig, AgentResources, AllocationMode, ResourceConfig
from accelkit.errors import ConfigError
from accelkit.partition import (
    DevicePartition,
    GlobalDeviceInfo,
    ResourcePartitioner,
    SlotPartition,
    distribute_devices,
    natural_sort_key,
)
from accelkit.plugin import PluginRole
from accelkit.types import AgentId, ComputeDevice, DeviceId, DeviceName, DeviceSlotInfo

G = 1024**3
M = 1024**2


def role_of(key: str) -> PluginRole:
    """The roles the shipped cpu and mem plugins declare; every other key an accelerator."""
    return {"cpu": PluginRole.CORES, "mem": PluginRole.MEMORY}.get(key, PluginRole.ACCELERATOR)


def info(key, ids, *, slot=None, numa=None, amount=1, by_amount=False, slot_type="count"):
    devices = [
        ComputeDevice(DeviceName(key), DeviceId(i), f"test:{i}", numa(i) if numa else None, 0, 1)
        for i in ids
    ]
    slot_name = slot or (key if key in ("cpu", "mem") else f"{key}.device")
    slots = {
        DeviceId(i): DeviceSlotInfo(slot_type, slot_name, amount, numa(i) if numa else None)
        for i in ids
    }
    return GlobalDeviceInfo(
        DeviceName(key), devices, slots, shared_by_amount=by_amount, role=role_of(key)
    )


def node(cores=8, mem=64 * G, gpus=5, **extra):
    result = {
        "cpu": info("cpu", [str(i) for i in range(cores)]),
        "mem": info("mem", ["root"], amount=mem, by_amount=True, slot_type="bytes"),
    }
    if gpus:
        result["cuda"] = info("cuda", [f"cuda{i}" for i in range(gpus)])
    result.update(extra)
    return result


def agents(n):
    return [AgentConfig(AgentId(f"agent-{i}")) for i in range(1, n + 1)]


def manual(**per_agent):
    return [AgentConfig(AgentId(name), AgentResources(**spec)) for name, spec in per_agent.items()]


def resource(**kw):
    return ResourceConfig(**kw)


# -- ordering (the seed examples) ----------------------------------------------------------------


def test_natural_sort_orders_numbers_by_value():
    ids = ["cuda10", "cuda2", "cuda0", "cuda1"]
    assert sorted(ids, key=natural_sort_key) == ["cuda0", "cuda1", "cuda2", "cuda10"]
    assert sorted(["10", "2", "0", "1"], key=natural_sort_key) == ["0", "1", "2", "10"]


def test_natural_sort_orders_digit_runs_of_any_length_by_value():
    long = "gpu" + "9" * 5000  # int() refuses more than 4,300 digits
    longer = "gpu1" + "0" * 5000
    assert sorted([longer, long, "gpu10", "gpu007", "gpu2"], key=natural_sort_key) == [
        "gpu2",
        "gpu007",
        "gpu10",
        long,
        longer,
    ]


@given(st.lists(st.integers(min_value=0, max_value=10**30), unique=True, max_size=12))
def test_natural_sort_matches_numeric_order(numbers):
    ids = [f"cuda{n}" for n in numbers]
    assert sorted(ids, key=natural_sort_key) == [f"cuda{n}" for n in sorted(numbers)]


@pytest.mark.parametrize(
    ("devices", "agents", "words"),
    [
        (["cuda0", "cuda1"], ["a", "a"], "agent id 'a' is listed twice"),  # cuda0 was lost
        (["cuda0", "cuda0"], ["a"], "device id 'cuda0' is listed twice"),
        ("cuda0", ["a"], "not the string 'cuda0'"),  # would split into 'c', 'u', ...
        (["cuda0"], "ab", "not the string 'ab'"),
    ],
)
def test_distribute_devices_refuses_repeated_or_string_ids(devices, agents, words):
    with pytest.raises(ValueError, match=words):
        distribute_devices(devices, agents)


def test_partitions_refuse_a_string_of_ids_and_negative_amounts():
    with pytest.raises(TypeError, match="not the string 'cuda0'"):
        DevicePartition("cuda0")
    with pytest.raises(ValueError, match="must not be negative"):
        SlotPartition({"mem": -1})
    assert DevicePartition(["cuda0"]).device_ids == ("cuda0",)


def test_five_gpus_over_three_agents_fill_from_front():
    split = distribute_devices([f"cuda{i}" for i in (4, 3, 2, 1, 0)], ["a", "b", "c"])
    assert split == {"a": ("cuda0", "cuda1"), "b": ("cuda2", "cuda3"), "c": ("cuda4",)}


# -- SHARED ----------------------------------------------------------------------------


def test_shared_gives_every_agent_everything_but_the_reserve():
    p = ResourcePartitioner(node(), resource(reserved_cpu=2, reserved_mem=4 * G))
    result = p.partition(agents(3), AllocationMode.SHARED)
    assert result.mode is AllocationMode.SHARED
    for parts in result.assignments.values():
        assert parts["cpu"] == DevicePartition.of("2", "3", "4", "5", "6", "7")
        assert parts["mem"] == SlotPartition({"mem": 60 * G}, ["root"])
        assert parts["cuda"].device_ids == tuple(f"cuda{i}" for i in range(5))
    assert all(set(s.values()) == {Decimal(1)} for s in result.scaling.values())
    assert result.reservation.cpu == ("0", "1")
    assert result.reservation.mem == 4 * G
    assert result.unassigned == {"cpu": (), "cuda": ()}


def test_one_agent_in_any_mode_behaves_as_shared_and_says_so():
    for mode in AllocationMode:
        p = ResourcePartitioner(node(), resource(allocation_mode=mode))
        specs = (
            manual(solo={"cpu": ("1",), "mem": G}) if mode is AllocationMode.MANUAL else agents(1)
        )
        result = p.partition(specs)
        assert result.mode is AllocationMode.SHARED
        parts = next(iter(result.assignments.values()))
        assert len(parts["cpu"].device_ids) == 7  # the reserve still comes off
        assert parts["mem"].slots["mem"] == 63 * G
        assert set(next(iter(result.scaling.values())).values()) == {Decimal(1)}
        if mode is not AllocationMode.SHARED:
            assert any("behaves as 'shared'" in w for w in result.warnings)


# -- AUTO_SPLIT ----------------------------------------------------------------------------


def test_autosplit_reserves_first_then_splits_and_aligns_memory():
    p = ResourcePartitioner(
        node(), resource(reserved_cpu=1, reserved_mem=G, memory_align_size=16 * M)
    )
    result = p.partition(agents(3), AllocationMode.AUTO_SPLIT)
    cpu = {a: parts["cpu"].device_ids for a, parts in result.assignments.items()}
    assert cpu == {"agent-1": ("1", "2", "3"), "agent-2": ("4", "5"), "agent-3": ("6", "7")}
    gpus = {a: parts["cuda"].device_ids for a, parts in result.assignments.items()}
    assert gpus == {
        "agent-1": ("cuda0", "cuda1"),
        "agent-2": ("cuda2", "cuda3"),
        "agent-3": ("cuda4",),
    }
    share = result.assignments[AgentId("agent-1")]["mem"].slots["mem"]
    assert share == 21 * G
    assert share % (16 * M) == 0
    scaling = [result.scaling[AgentId(f"agent-{i}")]["cuda.device"] for i in (1, 2, 3)]
    assert scaling == [Decimal("0.4"), Decimal("0.4"), Decimal("0.2")]
    assert sum(s["cpu"] for s in result.scaling.values()) <= 1
    assert result.allocatable["cpu"] == 7
    assert result.allocatable["mem"] == 63 * G


def test_autosplit_memory_share_rounds_down_to_alignment():
    mem = 10 * G + 5 * M
    p = ResourcePartitioner(node(mem=mem), resource(reserved_mem=0, memory_align_size=64 * M))
    result = p.partition(agents(3), AllocationMode.AUTO_SPLIT)
    share = result.capacity[AgentId("agent-1")]["mem"]
    assert share % (64 * M) == 0
    assert share <= (mem // 3) < share + 64 * M


def test_autosplit_with_zero_accelerators():
    p = ResourcePartitioner(node(gpus=0), resource())
    result = p.partition(agents(2), AllocationMode.AUTO_SPLIT)
    assert set(result.assignments[AgentId("agent-1")]) == {"cpu", "mem"}
    assert "cuda.device" not in result.allocatable
    assert result.unassigned == {"cpu": ()}


def test_autosplit_more_agents_than_devices():
    p = ResourcePartitioner(node(cores=4, gpus=2), resource(reserved_cpu=0))
    result = p.partition(agents(6), AllocationMode.AUTO_SPLIT)
    gpus = [result.assignments[AgentId(f"agent-{i}")]["cuda"].device_ids for i in range(1, 7)]
    assert gpus == [("cuda0",), ("cuda1",), (), (), (), ()]
    assert result.scaling[AgentId("agent-6")]["cuda.device"] == 0
    assert result.capacity[AgentId("agent-6")]["cuda.device"] == 0
    assert "agent 'agent-5' gets no cpu cores" in result.warnings


def test_autosplit_with_explicit_reserved_core_ids():
    p = ResourcePartitioner(node(cores=6), resource(reserved_cpu=("5", "0")))
    result = p.partition(agents(2), AllocationMode.AUTO_SPLIT)
    assert result.reservation.cpu == ("0", "5")
    cpu = [result.assignments[AgentId(a)]["cpu"].device_ids for a in ("agent-1", "agent-2")]
    assert cpu == [("1", "2"), ("3", "4")]


def test_reserved_count_takes_the_lowest_numbered_cores_in_natural_order():
    cores = info("cpu", ["10", "2", "1", "0"])
    p = ResourcePartitioner({"cpu": cores}, resource(reserved_cpu=2))
    assert p.reservation.cpu == ("0", "1")
    assert p.free_devices(DeviceName("cpu")) == ("2", "10")


def test_no_cpu_or_mem_plugin_reserves_nothing():
    gpus = {"cuda": info("cuda", ["cuda0", "cuda1"])}
    p = ResourcePartitioner(gpus, resource(reserved_cpu=("7",), reserved_mem=G))
    result = p.partition(agents(2), AllocationMode.AUTO_SPLIT)
    assert result.reservation.cpu == ()
    assert result.reservation.mem == 0


@pytest.mark.parametrize(
    ("reserved", "text"),
    [
        (8, "reserves 8 cpu core(s) but the node has 8"),
        (9, "reserves 9 cpu core(s)"),
        (("0", "99"), "unknown cpu core id(s) '99'"),
        (tuple(str(i) for i in range(8)), "reserves all 8 cpu core(s)"),
    ],
)
def test_bad_reserved_cpu_is_a_config_error(reserved, text):
    p = ResourcePartitioner(node(), resource(reserved_cpu=reserved), source="host.toml")
    with pytest.raises(ConfigError) as info_:
        p.partition(agents(2), AllocationMode.AUTO_SPLIT)
    assert text in str(info_.value)
    assert info_.value.key == "resource.reserved-cpu"
    assert info_.value.file == "host.toml"
    with pytest.raises(ConfigError):
        p.generate_shared_assignments([AgentId("a")])


def test_reserved_memory_beyond_the_node_is_a_config_error():
    p = ResourcePartitioner(node(mem=G), resource(reserved_mem=2 * G))
    with pytest.raises(ConfigError, match="reserves 2G of memory but the node has 1G") as exc:
        p.generate_autosplit_assignments([AgentId("a"), AgentId("b")])
    assert exc.value.key == "resource.reserved-mem"


def test_autosplit_with_no_agents_is_empty():
    assert ResourcePartitioner(node(), resource()).generate_autosplit_assignments([]) == {}


@pytest.mark.parametrize("mode", list(AllocationMode))
def test_an_agent_id_given_twice_is_a_config_error(mode):
    twice = [AgentConfig(AgentId(i)) for i in ("a", "b", "a")]
    with pytest.raises(ConfigError, match="given more than once") as exc:
        ResourcePartitioner(node(), resource()).partition(twice, mode)
    assert exc.value.agent == "a"


@pytest.mark.parametrize("mode", list(AllocationMode))
def test_partitioning_for_no_agents_is_a_config_error(mode):
    with pytest.raises(ConfigError, match="no agents") as exc:
        ResourcePartitioner(node(), resource()).partition([], mode)
    assert exc.value.key == "agents"


def test_a_plugin_with_several_slots_keeps_them_apart():
    mig = info("cuda", ["cuda0", "cuda1"])
    slots = dict(mig.device_slots)
    slots[DeviceId("cuda1")] = DeviceSlotInfo("unique", "cuda.mig-1g.10gb", 1)
    mixed = GlobalDeviceInfo(DeviceName("cuda"), mig.devices, slots)
    p = ResourcePartitioner({"cuda": mixed}, resource())
    result = p.partition(agents(2), AllocationMode.AUTO_SPLIT)
    assert result.capacity[AgentId("agent-1")] == {"cuda.device": 1, "cuda.mig-1g.10gb": 0}
    assert result.scaling[AgentId("agent-2")]["cuda.mig-1g.10gb"] == 1


# -- MANUAL ----------------------------------------------------------------------------


def test_manual_non_contiguous_ids_and_different_device_kinds():
    devices = node(gpus=4, rocm=info("rocm", ["rocm0", "rocm1"]))
    p = ResourcePartitioner(
        devices, resource(allocation_mode=AllocationMode.MANUAL, reserved_mem=0)
    )
    specs = manual(
        a={"cpu": ("7", "1", "3"), "mem": 8 * G, "devices": {"cuda": ("cuda3", "cuda0")}},
        b={"cpu": ("2",), "mem": 4 * G, "devices": {"rocm": ("rocm1",)}},
    )
    result = p.partition(specs)
    a, b = result.assignments[AgentId("a")], result.assignments[AgentId("b")]
    assert a["cpu"].device_ids == ("1", "3", "7")
    assert a["cuda"].device_ids == ("cuda0", "cuda3")
    assert a["rocm"].device_ids == ()
    assert b["rocm"].device_ids == ("rocm1",)
    assert b["cuda"].device_ids == ()
    assert a["mem"].slots == {"mem": 8 * G}
    assert result.unassigned == {
        "cpu": ("4", "5", "6"),  # core 0 is reserved
        "cuda": ("cuda1", "cuda2"),
        "rocm": ("rocm0",),
    }
    assert any(
        "cuda device(s) assigned to no agent: 'cuda1', 'cuda2'" in w for w in result.warnings
    )
    assert result.scaling[AgentId("a")]["cuda.device"] == Decimal("0.5")
    assert result.scaling[AgentId("a")]["mem"] == Decimal("0.125")


def test_manual_without_unassigned_devices_has_no_warning():
    p = ResourcePartitioner(node(cores=3, gpus=1), resource(reserved_cpu=1))
    specs = manual(
        a={"cpu": ("1",), "mem": G, "devices": {"cuda": ("cuda0",)}},
        b={"cpu": ("2",), "mem": G},
    )
    result = p.partition(specs, AllocationMode.MANUAL)
    assert result.warnings == ()
    assert result.unassigned == {"cpu": (), "cuda": ()}


def test_manual_agent_without_mem_gets_none_and_a_warning():
    p = ResourcePartitioner(node(), resource())
    result = p.partition(
        manual(a={"cpu": ("1",)}, b={"cpu": ("2",), "mem": G}), AllocationMode.MANUAL
    )
    assert result.capacity[AgentId("a")]["mem"] == 0
    assert "agent 'a' gets no memory" in result.warnings


def test_resources_outside_manual_mode_are_ignored_with_a_warning():
    p = ResourcePartitioner(node(), resource())
    result = p.partition(manual(a={"cpu": ("1",)}, b={"cpu": ("2",)}), AllocationMode.AUTO_SPLIT)
    assert any("manual' only" in w for w in result.warnings)


def test_generate_manual_assignments_returns_the_partitions():
    p = ResourcePartitioner(node(), resource())
    got = p.generate_manual_assignments(manual(a={"cpu": ("4",), "mem": G}))
    assert got[AgentId("a")]["cpu"] == DevicePartition.of("4")


def test_a_lone_manual_agent_without_resources_is_simply_shared():
    p = ResourcePartitioner(node(), resource(allocation_mode=AllocationMode.MANUAL))
    result = p.partition(agents(1))
    assert result.mode is AllocationMode.SHARED
    assert len(result.assignments[AgentId("agent-1")]["cuda"].device_ids) == 5


def test_a_lone_manual_agent_is_still_checked():
    p = ResourcePartitioner(node(), resource(allocation_mode=AllocationMode.MANUAL))
    with pytest.raises(ConfigError, match="unknown device id 'cuda9'"):
        p.partition(manual(solo={"cpu": ("1",), "devices": {"cuda": ("cuda9",)}}))
