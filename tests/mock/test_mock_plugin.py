from __future__ import annotations

import asyncio
from decimal import Decimal

import pytest

from accelkit.metrics import MetricContext
from accelkit.partition import DevicePartition
from accelkit.types import AgentId, SlotType, Workload
from accelkit_mock import accelkit_compute_plugins
from accelkit_mock.plugin import deterministic_percent

KINDS = {
    "kinds": [
        {"key": "cpu", "devices": [{"id": str(i), "numa-node": i // 2} for i in range(4)]},
        {"key": "mem", "devices": [{"memory": "8G"}]},
        {
            "key": "cuda",
            "devices": [
                {"id": "cuda0", "numa-node": 0, "memory": "40G"},
                {"id": "cuda1", "numa-node": 1, "memory": "40G"},
                {"id": "mig0", "mig-profile": "1g.10gb"},
            ],
        },
        {
            "key": "npu",
            "allocation": "fractional",
            "quantum": "0.25",
            "devices": [{"id": "npu0", "amount": "1"}, {"id": "npu1", "amount": "1"}],
        },
    ]
}


def started(config=KINDS):
    plugins = accelkit_compute_plugins(config=config)
    for plugin in plugins:
        asyncio.run(plugin.init())
        asyncio.run(plugin.discover())
    return {p.key: p for p in plugins}


def test_one_plugin_per_kind_with_its_own_key():
    plugins = started()
    assert list(plugins) == ["cpu", "mem", "cuda", "npu"]
    assert type(plugins["cpu"]) is not type(plugins["cuda"])
    assert plugins["mem"].shared_by_amount
    assert not plugins["cuda"].shared_by_amount


def test_slots_per_kind():
    plugins = started()
    assert [(s.name, s.type) for s in plugins["cpu"].configurable_slots()] == [
        ("cpu", SlotType.COUNT)
    ]
    assert [(s.name, s.type) for s in plugins["mem"].configurable_slots()] == [
        ("mem", SlotType.BYTES)
    ]
    assert {(s.name, s.type) for s in plugins["cuda"].configurable_slots()} == {
        ("cuda.device", SlotType.COUNT),
        ("cuda.mig-1g.10gb", SlotType.UNIQUE),
    }
    assert [s.name for s in plugins["npu"].configurable_slots()] == ["npu.shares"]
    mem_slots = plugins["mem"].device_slots(plugins["mem"].devices)
    assert mem_slots["root"].amount == Decimal(8 * 1024**3)


def test_no_config_offers_no_plugins():
    assert accelkit_compute_plugins(config={}) == []


def test_hook_sets_mock_devices_variable():
    cuda = started()["cuda"]
    ctx = cuda.create_agent_context(AgentId("a"), DevicePartition.of("cuda0", "cuda1"))
    alloc = ctx.alloc_map.allocate({"cuda.device": Decimal(2)})
    config = asyncio.run(ctx.create_lifecycle_hook(Workload("w"), alloc).pre_create())
    assert config.env_vars == {"MOCK_CUDA_DEVICES": "cuda0,cuda1"}


def test_fractional_kind_uses_a_fraction_map_with_its_quantum():
    npu = started()["npu"]
    ctx = npu.create_agent_context(AgentId("a"), DevicePartition.of("npu0", "npu1"))
    alloc = ctx.alloc_map.allocate({"npu.shares": Decimal("1.5")})
    assert sum(alloc["npu.shares"].values()) == Decimal("1.5")
    assert all(v % Decimal("0.25") == 0 for v in alloc["npu.shares"].values())


def test_metrics_are_deterministic():
    cuda = started()["cuda"]
    first = asyncio.run(cuda.gather_node_metrics(MetricContext()))
    second = asyncio.run(cuda.gather_node_metrics(MetricContext()))
    assert [m.key for m in first] == ["utilization", "memory_used"]
    assert first[0].per_device.keys() == {"cuda0", "cuda1", "mig0"}
    assert deterministic_percent("cuda0", 100.0) == deterministic_percent("cuda0", 101.0)
    assert 0 <= deterministic_percent("cuda1", 12345.0) <= 100
    assert first[0].per_device.keys() == second[0].per_device.keys()
    # kinds that declare no memory report no memory metric
    cpu_metrics = asyncio.run(started()["cpu"].gather_node_metrics(MetricContext()))
    assert [m.key for m in cpu_metrics] == ["utilization"]


@pytest.mark.parametrize("key", ["cpu", "mem", "cuda", "npu"])
def test_node_info_names_the_kind(key):
    info = asyncio.run(started()[key].get_node_info())
    assert info.facts["kind"] == key


def test_device_node_is_mounted_for_a_container_only():
    kinds = {
        "kinds": [
            {
                "key": "tpu",
                "devices": [
                    {"id": "t0", "device-node": "/dev/tpu0"},
                    {"id": "t1", "device-node": "/dev/tpu1"},
                    {"id": "t2"},
                ],
            }
        ]
    }
    tpu = started(kinds)["tpu"]
    ctx = tpu.create_agent_context(AgentId("a"), DevicePartition.of("t0", "t1", "t2"))
    alloc = {"tpu.device": {"t1": Decimal(1), "t2": Decimal(1)}}
    devices = {d.device_id: d for d in tpu.devices}
    container = tpu.create_lifecycle_hook(Workload.container("c"), alloc, devices)
    config = asyncio.run(container.pre_create())
    assert [(m.source, m.type.value) for m in config.mounts] == [("/dev/tpu1", "device")]
    assert config.env_vars == {"MOCK_TPU_DEVICES": "t1,t2"}
    tree = asyncio.run(ctx.create_lifecycle_hook(Workload("w"), alloc).pre_create())
    assert tree.mounts == ()


def test_devices_sharing_a_device_node_mount_it_once():
    shared = [{"id": f"t{i}", "device-node": "/dev/tpu0"} for i in range(3)]
    tpu = started({"kinds": [{"key": "tpu", "devices": shared}]})["tpu"]
    alloc = {"tpu.device": {f"t{i}": Decimal(1) for i in range(3)}}
    devices = {d.device_id: d for d in tpu.devices}
    container = tpu.create_lifecycle_hook(Workload.container("c"), alloc, devices)
    config = asyncio.run(container.pre_create())
    assert [m.source for m in config.mounts] == ["/dev/tpu0"]  # a target given twice is refused


def test_a_mig_like_device_names_its_parent_as_the_cuda_plugin_does():
    kinds = {
        "kinds": [
            {
                "key": "gpu",
                "devices": [
                    {"id": "g0"},
                    {"id": "g0-mig1", "mig-profile": "1g.10gb", "parent": "g0"},
                ],
            }
        ]
    }
    devices = {d.device_id: d for d in started(kinds)["gpu"].devices}
    assert devices["g0-mig1"].extra["parent_id"] == "g0"
    assert "parent_id" not in devices["g0"].extra


def test_slots_asked_again_are_the_same_and_follow_a_declaration_made_since(tmp_path):
    """A node's start asks for the slots three times: the answer is made once, and a device
    declared anew by a rediscovery (its memory changed in the device file) gets its new slot."""
    devices = tmp_path / "devices.toml"
    kind = '[[kinds]]\nkey = "mem"\n[[kinds.devices]]\nid = "root"\nmemory = "{}"\n'
    devices.write_text(kind.format("8G"))
    [mem] = started({"config-file": str(devices)}).values()
    first = mem.device_slots(mem.devices)
    assert mem.device_slots(mem.devices) == first
    assert mem.device_slots(mem.devices)["root"] is first["root"]
    assert mem.configurable_slots() == mem.configurable_slots()
    assert mem.configurable_slots() is not mem.configurable_slots()  # the caller's own list

    devices.write_text(kind.format("16G"))
    rediscovered = asyncio.run(mem.discover())
    assert mem.device_slots(rediscovered)["root"].amount == Decimal(16 * 1024**3)
    assert first["root"].amount == Decimal(8 * 1024**3)
