"""MANUAL validation: every problem is a ConfigError naming the file, the agent and the key."""

from __future__ import annotations

import pytest

from accelkit.config import AgentConfig, AgentResources, AllocationMode, ResourceConfig
from accelkit.errors import ConfigError, ConfigErrors
from accelkit.partition import GlobalDeviceInfo, ResourcePartitioner
from accelkit.plugin import PluginRole
from accelkit.types import AgentId, ComputeDevice, DeviceId, DeviceName, DeviceSlotInfo

G = 1024**3


def role_of(key: str) -> PluginRole:
    """The roles the shipped cpu and mem plugins declare; every other key an accelerator."""
    return {"cpu": PluginRole.CORES, "mem": PluginRole.MEMORY}.get(key, PluginRole.ACCELERATOR)


def info(key, ids, *, amount=1, by_amount=False, slot_type="count"):
    devices = [ComputeDevice(DeviceName(key), DeviceId(i), "t", None, 0, 1) for i in ids]
    slot = key if key in ("cpu", "mem") else f"{key}.device"
    slots = {DeviceId(i): DeviceSlotInfo(slot_type, slot, amount) for i in ids}
    return GlobalDeviceInfo(
        DeviceName(key), devices, slots, shared_by_amount=by_amount, role=role_of(key)
    )


NODE = {
    "cpu": info("cpu", [str(i) for i in range(8)]),
    "mem": info("mem", ["root"], amount=32 * G, by_amount=True, slot_type="bytes"),
    "cuda": info("cuda", [f"cuda{i}" for i in range(4)]),
}


def run(*specs, node=NODE, **resource):
    agents = [
        AgentConfig(AgentId(name), None if spec is None else AgentResources(**spec))
        for name, spec in specs
    ]
    config = ResourceConfig(allocation_mode=AllocationMode.MANUAL, **resource)
    partitioner = ResourcePartitioner(node, config, source="/etc/accelkit/host.toml")
    return partitioner.partition(agents)


def one_error(*specs, **kw) -> ConfigError:
    with pytest.raises(ConfigError) as info_:
        run(*specs, **kw)
    assert not isinstance(info_.value, ConfigErrors), str(info_.value)
    assert info_.value.file == "/etc/accelkit/host.toml"
    return info_.value


OK_B = ("b", {"cpu": ("6",), "mem": G})


def test_unknown_device_name():
    err = one_error(("a", {"cpu": ("1",), "mem": G, "devices": {"rocm": ("rocm0",)}}), OK_B)
    assert err.agent == "a"
    assert err.key == "agents[0].resource.devices.rocm"
    assert "unknown device name 'rocm'" in err.message
    assert "'cpu', 'cuda'" in err.message


def test_device_ids_for_a_plugin_split_by_amount():
    err = one_error(("a", {"cpu": ("1",), "mem": G, "devices": {"mem": ("root",)}}), OK_B)
    assert "split by amount" in err.message


def test_unknown_device_id():
    err = one_error(OK_B, ("a", {"cpu": ("1",), "mem": G, "devices": {"cuda": ("cuda9",)}}))
    assert (err.agent, err.key) == ("a", "agents[1].resource.devices.cuda")
    assert "unknown device id 'cuda9'" in err.message
    assert "'cuda0', 'cuda1', 'cuda2', 'cuda3'" in err.message


def test_unknown_cpu_core():
    err = one_error(("a", {"cpu": ("1", "64"), "mem": G}), OK_B)
    assert err.key == "agents[0].resource.cpu"
    assert "unknown device id '64' of 'cpu'" in err.message


def test_device_given_to_two_agents():
    err = one_error(
        ("a", {"cpu": ("1",), "mem": G, "devices": {"cuda": ("cuda0", "cuda1")}}),
        ("b", {"cpu": ("2",), "mem": G, "devices": {"cuda": ("cuda1",)}}),
    )
    assert (err.agent, err.key) == ("b", "agents[1].resource.devices.cuda")
    assert "'cuda1' of 'cuda' is also given to agent 'a'" in err.message


def test_cpu_core_given_to_two_agents():
    err = one_error(("a", {"cpu": ("1", "2"), "mem": G}), ("b", {"cpu": ("2",), "mem": G}))
    assert (err.agent, err.key) == ("b", "agents[1].resource.cpu")
    assert "also given to agent 'a'" in err.message


def test_device_listed_twice_by_one_agent():
    err = one_error(("a", {"cpu": ("1", "1"), "mem": G}), OK_B)
    assert "listed twice" in err.message


def test_reserved_core_given_to_an_agent():
    err = one_error(("a", {"cpu": ("0", "1"), "mem": G}), OK_B)
    assert "cpu core '0' is reserved by resource.reserved-cpu" in err.message


def test_empty_cpu():
    err = one_error(("a", {"cpu": (), "mem": G}), OK_B)
    assert (err.agent, err.key) == ("a", "agents[0].resource.cpu")
    assert "no cpu core" in err.message


def test_missing_cpu():
    err = one_error(("a", {"mem": G}), OK_B)
    assert (err.agent, err.key) == ("a", "agents[0].resource.cpu")
    assert "missing 'cpu'" in err.message


def test_missing_cpu_is_fine_without_a_cpu_plugin():
    node = {"cuda": NODE["cuda"]}
    result = run(("a", {"devices": {"cuda": ("cuda0",)}}), ("b", {}), node=node)
    assert result.assignments[AgentId("a")][DeviceName("cuda")].device_ids == ("cuda0",)


def test_empty_device_list():
    err = one_error(("a", {"cpu": ("1",), "mem": G, "devices": {"cuda": ()}}), OK_B)
    assert "no cuda device" in err.message


def test_memory_over_subscribed():
    err = one_error(
        ("a", {"cpu": ("1",), "mem": 20 * G}),
        ("b", {"cpu": ("2",), "mem": 12 * G}),
        ("c", {"cpu": ("3",), "mem": 8 * G}),
    )
    assert (err.agent, err.key) == ("b", "agents[1].resource.mem")
    assert "memory over-subscribed" in err.message
    assert "32G so far, but only 31G is left after reserved-mem" in err.message


def test_memory_exactly_what_is_left_is_fine():
    result = run(("a", {"cpu": ("1",), "mem": 16 * G}), ("b", {"cpu": ("2",), "mem": 15 * G}))
    assert sum(c["mem"] for c in result.capacity.values()) == 31 * G


def test_mem_without_a_memory_plugin():
    node = {"cpu": NODE["cpu"]}
    err = one_error(("a", {"cpu": ("1",), "mem": G}), ("b", {"cpu": ("2",)}), node=node)
    assert "no memory plugin" in err.message
    assert err.key == "agents[0].resource.mem"


def test_cpu_without_a_cpu_plugin():
    node = {"cuda": NODE["cuda"]}
    err = one_error(("a", {"cpu": ("1",)}), ("b", {"devices": {"cuda": ("cuda0",)}}), node=node)
    assert "unknown device name 'cpu'" in err.message


def test_agent_without_resources_in_manual_mode():
    err = one_error(("a", None), OK_B)
    assert (err.agent, err.key) == ("a", "agents[0].resource")
    assert "needs the agent's [agents.resource]" in err.message


def test_every_problem_is_reported_at_once():
    with pytest.raises(ConfigErrors) as info_:
        run(
            ("a", {"cpu": ("1", "99"), "mem": 40 * G, "devices": {"cuda": ("cuda7",)}}),
            ("b", {"cpu": ("1",), "mem": G, "devices": {"npu": ("npu0",)}}),
            reserved_cpu=("42",),
        )
    errors = info_.value.errors
    keys = [(e.agent, e.key) for e in errors]
    assert keys == [
        (None, "resource.reserved-cpu"),
        ("a", "agents[0].resource.cpu"),
        ("a", "agents[0].resource.devices.cuda"),
        ("a", "agents[0].resource.mem"),
        ("b", "agents[1].resource.cpu"),
        ("b", "agents[1].resource.devices.npu"),
    ]
    text = str(info_.value)
    assert text.startswith("6 problem(s) in the configuration:")
    assert "/etc/accelkit/host.toml: agent 'b': key 'agents[1].resource.cpu'" in text
