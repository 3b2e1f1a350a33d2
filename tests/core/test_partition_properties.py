"""Invariants of AUTO_SPLIT and MANUAL over random device sets and agent lists."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from accelkit.config import AgentConfig, AgentResources, AllocationMode, ResourceConfig
from accelkit.errors import ConfigError, ConfigErrors
from accelkit.partition import GlobalDeviceInfo, ResourcePartitioner, natural_sort_key
from accelkit.plugin import PluginRole
from accelkit.types import AgentId, ComputeDevice, DeviceId, DeviceName, DeviceSlotInfo

M = 1024**2


def role_of(key: str) -> PluginRole:
    """The roles the shipped cpu and mem plugins declare; every other key an accelerator."""
    return {"cpu": PluginRole.CORES, "mem": PluginRole.MEMORY}.get(key, PluginRole.ACCELERATOR)


def info(key, ids, *, amounts=None, by_amount=False, slot_type="count"):
    devices = [ComputeDevice(DeviceName(key), DeviceId(i), "t", None, 0, 1) for i in ids]
    slot = key if key in ("cpu", "mem") else f"{key}.device"
    slots = {DeviceId(i): DeviceSlotInfo(slot_type, slot, (amounts or {}).get(i, 1)) for i in ids}
    return GlobalDeviceInfo(
        DeviceName(key), devices, slots, shared_by_amount=by_amount, role=role_of(key)
    )


def errors_of(exc: ConfigError) -> list[ConfigError]:
    return list(exc.errors) if isinstance(exc, ConfigErrors) else [exc]


prefixes = st.sampled_from(["cuda", "gpu-", "npu", "", "dev.", "x"])


@st.composite
def device_ids(draw, min_size=0):
    prefix = draw(prefixes)
    numbers = draw(st.sets(st.integers(0, 300), min_size=min_size, max_size=40))
    return [f"{prefix}{n}" for n in draw(st.permutations(sorted(numbers)))]


@st.composite
def nodes(draw):
    node = {"cpu": info("cpu", [str(i) for i in range(draw(st.integers(1, 96)))])}
    mem = draw(st.integers(0, 2**42))
    node["mem"] = info("mem", ["root"], amounts={"root": mem}, by_amount=True, slot_type="bytes")
    for key in draw(st.sets(st.sampled_from(["cuda", "rocm", "tpu"]), max_size=3)):
        ids = draw(device_ids())
        amounts = {i: draw(st.integers(1, 4)) for i in ids}
        node[key] = info(key, ids, amounts=amounts)
    return node


agent_lists = st.lists(
    st.text("abcdefghij-0123456789", min_size=1, max_size=6), min_size=2, max_size=20, unique=True
)


@settings(max_examples=120, deadline=None)
@given(
    nodes(),
    agent_lists,
    st.integers(0, 4),
    st.integers(0, 2**33),
    st.sampled_from([1, 4096, 16 * M]),
)
def test_autosplit_is_exhaustive_disjoint_even_and_ordered(node, names, reserved, mem, align):
    resource = ResourceConfig(reserved_cpu=reserved, reserved_mem=mem, memory_align_size=align)
    partitioner = ResourcePartitioner(node, resource)
    agents = [AgentConfig(AgentId(n)) for n in names]
    try:
        result = partitioner.partition(agents, AllocationMode.AUTO_SPLIT)
    except ConfigError as exc:  # only a reserve that leaves nothing may fail
        keys = {e.key for e in errors_of(exc)}
        assert keys <= {"resource.reserved-cpu", "resource.reserved-mem"}
        cores = len(node["cpu"].devices)
        total_mem = node["mem"].device_slots["root"].amount
        assert reserved >= cores or (total_mem and mem >= total_mem)
        return
    assert list(result.assignments) == names
    for key, dev in node.items():
        if dev.shared_by_amount:
            shares = [result.assignments[AgentId(n)][key].slots["mem"] for n in names]
            left = result.allocatable["mem"]
            assert len(set(shares)) == 1
            assert shares[0] % align == 0
            assert sum(shares) <= left < sum(shares) + len(names) * align
            continue
        runs = [result.assignments[AgentId(n)][key].device_ids for n in names]
        flat = [d for run in runs for d in run]
        expected = sorted(dev.device_ids, key=natural_sort_key)
        if key == "cpu":
            assert list(result.reservation.cpu) == expected[: len(result.reservation.cpu)]
            expected = expected[len(result.reservation.cpu) :]
        assert flat == expected  # exhaustive, disjoint and in natural order, contiguous runs
        sizes = [len(r) for r in runs]
        assert max(sizes) - min(sizes) <= 1
        assert sizes == sorted(sizes, reverse=True)  # the first agents get the extra device
    for slot, node_total in result.allocatable.items():
        factors = [result.scaling[AgentId(n)][slot] for n in names]
        assert all(0 <= f <= 1 for f in factors)
        assert sum(factors) <= 1
        if node_total:
            for n, f in zip(names, factors, strict=True):
                exact = result.capacity[AgentId(n)][slot] / node_total
                assert f <= exact < f + Decimal("1e-11")


@settings(max_examples=80, deadline=None)
@given(nodes(), agent_lists, st.data())
def test_manual_assignments_are_disjoint_and_account_for_every_device(node, names, data):
    resource = ResourceConfig(reserved_cpu=0, reserved_mem=0)
    agents = []
    for name in names:
        devices = {
            key: tuple(data.draw(st.lists(st.sampled_from(dev.device_ids), min_size=1, max_size=3)))
            for key, dev in node.items()
            if key not in ("cpu", "mem") and dev.device_ids and data.draw(st.booleans())
        }
        cpu = tuple(
            data.draw(st.lists(st.sampled_from(node["cpu"].device_ids), min_size=1, max_size=3))
        )
        agents.append(AgentConfig(AgentId(name), AgentResources(cpu, 0, devices)))
    try:
        result = ResourcePartitioner(node, resource).partition(agents, AllocationMode.MANUAL)
    except ConfigError as exc:
        for error in errors_of(exc):
            assert error.file == "<config>"
            assert error.agent in names
            assert "listed twice" in error.message or "also given to agent" in error.message
        return
    for key, dev in node.items():
        if dev.shared_by_amount:
            continue
        held = [d for n in names for d in result.assignments[AgentId(n)][key].device_ids]
        assert len(held) == len(set(held))
        assert sorted(held + list(result.unassigned[key])) == sorted(dev.device_ids)
