"""Plugin roles: the core asks whether a plugin plays the node's cores, its memory or an
accelerator, never what its key is."""

from __future__ import annotations

import asyncio
import types
from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import Any, ClassVar

import pytest

import accelkit_mock
from accelkit import hookimpl
from accelkit.bridge.k8s import k8s_resources
from accelkit.bridge.slurm.gres import gres_devices
from accelkit.config import AgentConfig, AgentResources, AllocationMode, HostConfig, ResourceConfig
from accelkit.discovery import PluginLoader
from accelkit.errors import ConfigError
from accelkit.host import PartitionHost
from accelkit.plugin import AbstractComputePlugin, AbstractLifecycleHook, PluginRole
from accelkit.registry import PluginStatus
from accelkit.selection import PluginSelection
from accelkit.types import (
    AgentId,
    ComputeDevice,
    DeviceId,
    DeviceName,
    DeviceSlotInfo,
    SlotName,
    SlotSpec,
    SlotType,
    WorkloadConfig,
)
from accelkit.workload.cdi_spec import agent_cdi_spec
from accelkit_cpu import CPUPlugin
from accelkit_mem import MemPlugin
from accelkit_mock.plugin import MockPlugin
from accelkit_mock.spec import load_kinds

G = 1024**3
#: the mock plays memory and two GPUs; the cores come from the plugin keyed "vcpu" below
KINDS = [
    {"key": "mem", "devices": [{"id": "root", "memory": "16G"}]},
    {
        "key": "cuda",
        "devices": [{"id": "cuda0", "numa-node": 0}, {"id": "cuda1", "numa-node": 1}],
    },
]


class Hook(AbstractLifecycleHook):
    async def pre_create(self) -> WorkloadConfig:
        return WorkloadConfig(env_vars={"ROLE_TEST_DEVICES": ",".join(self.allocated_device_ids)})


class RolePlugin(AbstractComputePlugin):
    """Four devices on two NUMA nodes, in one slot; key, role and slot set per subclass."""

    key: ClassVar[DeviceName] = DeviceName("vcpu")
    role: ClassVar[PluginRole] = PluginRole.CORES
    api_version: ClassVar[str] = "2.0"
    slot: ClassVar[str] = "cpu"
    lifecycle_hook_class = Hook

    async def list_devices(self) -> Sequence[ComputeDevice]:
        return [
            ComputeDevice(self.key, DeviceId(str(i)), f"{self.key}{i}", i // 2, 0, 1)
            for i in range(4)
        ]

    def configurable_slots(self) -> Sequence[SlotSpec]:
        return [SlotSpec(SlotName(self.slot), SlotType.COUNT)]

    def device_slots(self, devices: Iterable[ComputeDevice]) -> dict[DeviceId, DeviceSlotInfo]:
        slot = SlotName(self.slot)
        return {
            d.device_id: DeviceSlotInfo(SlotType.COUNT, slot, Decimal(1), d.numa_node)
            for d in devices
        }


def plugin_class(key: str, role: PluginRole, slot: str | None = None) -> type[RolePlugin]:
    attributes = {"key": DeviceName(key), "role": role, "slot": slot or f"{key}.device"}
    return type(f"{key.title()}Plugin", (RolePlugin,), attributes)


def module_returning(*plugins: object) -> types.SimpleNamespace:
    @hookimpl
    def accelkit_compute_plugins() -> list[object]:
        return list(plugins)

    return types.SimpleNamespace(accelkit_compute_plugins=accelkit_compute_plugins)


def loader_with_vcpu(kinds: list[dict[str, Any]] = KINDS) -> PluginLoader:
    loader = PluginLoader(PluginSelection(configs={"mock": {"kinds": kinds}}))
    loader.register(accelkit_mock, "mock")
    loader.register(module_returning(RolePlugin()), "vcpu")
    loader.build()
    return loader


def start(loader: PluginLoader) -> list[AbstractComputePlugin]:
    loader.build()
    return asyncio.run(loader.start())


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# -- the role itself ----------------------------------------------------------------------------


def test_roles_and_their_bare_slots():
    assert [r.value for r in PluginRole] == ["cores", "memory", "accelerator"]
    assert PluginRole.CORES.bare_slot == "cpu"
    assert PluginRole.MEMORY.bare_slot == "mem"
    assert PluginRole.ACCELERATOR.bare_slot is None
    assert PluginRole.of_bare_slot("cpu") is PluginRole.CORES
    assert PluginRole.of_bare_slot("mem") is PluginRole.MEMORY
    assert PluginRole.of_bare_slot("cuda.device") is None
    assert PluginRole.of_bare_slot("cuda") is None


def test_every_plugin_is_an_accelerator_unless_it_says_otherwise():
    import accelkit.plugin

    assert "PluginRole" in accelkit.plugin.__all__
    assert AbstractComputePlugin.role is PluginRole.ACCELERATOR
    assert CPUPlugin.role is PluginRole.CORES
    assert MemPlugin.role is PluginRole.MEMORY


def test_mock_kinds_cpu_and_mem_play_cores_and_memory():
    config = {"kinds": [{"key": k, "devices": []} for k in ("cpu", "mem", "npu")]}
    roles = {k.key: MockPlugin.for_kind(k, config).role for k in load_kinds(config)}
    assert roles == {
        "cpu": PluginRole.CORES,
        "mem": PluginRole.MEMORY,
        "npu": PluginRole.ACCELERATOR,
    }


# -- the loader refuses what breaks the roles ---------------------------------------------------


@pytest.mark.parametrize(("role", "slot"), [(PluginRole.CORES, "cpu"), (PluginRole.MEMORY, "mem")])
def test_a_second_plugin_of_a_role_fails_naming_both(role, slot):
    loader = PluginLoader()
    first, second = plugin_class("first", role, slot), plugin_class("second", role, slot)
    loader.register(module_returning(first()), "first", distribution="dist-a")
    loader.register(module_returning(second()), "second", distribution="dist-b")
    plugins = start(loader)
    assert [p.key for p in plugins] == ["first"]
    record = loader.records["second"]
    assert record.status is PluginStatus.FAILED
    error = record.error or ""
    assert "PluginContractError" in error
    assert f"plugin role '{role.value}' claimed by both" in error
    assert "FirstPlugin (plugin 'first' from dist-a)" in error
    assert "SecondPlugin (plugin 'second' from dist-b)" in error
    assert loader.records["first"].status is PluginStatus.LOADED


def test_a_refused_distribution_registers_none_of_its_plugins():
    """A distribution whose second plugin collides leaves no key of the first behind."""
    loader = PluginLoader()
    loader.register(module_returning(RolePlugin()), "vcpu")
    both = module_returning(
        plugin_class("npu", PluginRole.ACCELERATOR)(), plugin_class("cores2", PluginRole.CORES)()
    )
    loader.register(both, "both")
    loader.register(module_returning(plugin_class("npu", PluginRole.ACCELERATOR)()), "npu")
    plugins = start(loader)
    assert loader.records["both"].status is PluginStatus.FAILED
    assert loader.records["npu"].status is PluginStatus.LOADED
    assert sorted(p.key for p in plugins) == ["npu", "vcpu"]


@pytest.mark.parametrize(("key", "slot"), [("npu", "cpu"), ("cpu", "cpu"), ("ram", "mem")])
def test_an_accelerator_offering_a_bare_slot_is_refused(key, slot):
    loader = PluginLoader()
    loader.register(module_returning(plugin_class(key, PluginRole.ACCELERATOR, slot)()), key)
    assert start(loader) == []
    error = loader.records[key].error or ""
    assert f"reports slot {slot!r}, which only the plugin with role" in error
    assert "but it declares role 'accelerator'" in error


def test_the_refusal_names_the_plugin_that_owns_the_bare_slot():
    loader = PluginLoader()
    loader.register(module_returning(RolePlugin()), "vcpu")
    loader.register(module_returning(plugin_class("npu", PluginRole.ACCELERATOR, "cpu")()), "npu")
    start(loader)
    error = loader.records["npu"].error or ""
    assert "set role = PluginRole.CORES or name the slot 'npu.<slot>'" in error
    assert "that slot belongs to RolePlugin (plugin 'vcpu'" in error


def test_memory_cannot_offer_the_cpu_slot():
    loader = PluginLoader()
    loader.register(module_returning(plugin_class("ram", PluginRole.MEMORY, "cpu")()), "ram")
    assert start(loader) == []
    assert "declares role 'memory'" in (loader.records["ram"].error or "")


def test_a_role_that_is_not_a_plugin_role_is_refused():
    cls = type("TextRole", (RolePlugin,), {"role": "cores"})
    loader = PluginLoader()
    loader.register(module_returning(cls()), "text")
    assert start(loader) == []
    assert "no valid 'role' (got 'cores')" in (loader.records["text"].error or "")


# -- a cores plugin keyed other than "cpu" ------------------------------------------------------


def test_a_cores_plugin_of_another_key_gives_up_reserved_cpu():
    config = HostConfig(
        resource=ResourceConfig(allocation_mode=AllocationMode.AUTO_SPLIT, reserved_cpu=1)
    ).with_agent_count(2)

    async def body():
        async with PartitionHost.open(config, loader=loader_with_vcpu()) as host:
            assert host.result.reservation.cpu == ("0",)
            assert host.result.reservation.mem == G
            plan = host.plan()
            assert plan["reserved"] == {"cpu": "1", "mem": str(G)}
            first, second = plan["agents"]["agent-1"], plan["agents"]["agent-2"]
            assert list(first["devices"]) == ["vcpu", "mem", "cuda"]  # cores, memory, the rest
            assert first["devices"]["vcpu"] == ["1", "2"]
            assert second["devices"]["vcpu"] == ["3"]
            assert list(first["slots"]) == ["cpu", "mem", "cuda.device"]
            assert first["slots"]["cpu"] == "2"
            assert second["slots"]["cpu"] == "1"
            assert plan["unassigned"] == {"vcpu": [], "cuda": []}

    run(body())


def test_reserved_cpu_as_a_list_names_the_cores_plugins_devices():
    config = HostConfig(resource=ResourceConfig(reserved_cpu=("2", "3")))

    async def body():
        async with PartitionHost.open(config, loader=loader_with_vcpu()) as host:
            assert host.result.reservation.cpu == ("2", "3")
            agent = host.agents[AgentId("agent-1")]
            assert agent.device_ids()[DeviceName("vcpu")] == ["0", "1"]

    run(body())


def test_slot_cpu_allocates_from_the_cores_plugin_after_the_accelerators():
    config = HostConfig(resource=ResourceConfig(reserved_cpu=0))

    async def body():
        async with PartitionHost.open(config, loader=loader_with_vcpu()) as host:
            agent = host.agents[AgentId("agent-1")]
            assert list(agent.contexts) == ["cuda", "vcpu", "mem"]
            assert agent.plugin_of("cpu") == "vcpu"
            assert agent.provider(PluginRole.CORES) == "vcpu"
            assert agent.provider(PluginRole.MEMORY) == "mem"
            slots = {
                SlotName("cpu"): Decimal(2),
                SlotName("mem"): Decimal(G),
                SlotName("cuda.device"): Decimal(1),
            }
            alloc = agent.allocate(slots)
            assert list(alloc) == ["cuda", "vcpu", "mem"]
            gpu = next(iter(alloc[DeviceName("cuda")][SlotName("cuda.device")]))
            cores = set(alloc[DeviceName("vcpu")][SlotName("cpu")])
            # the cores follow the GPU's NUMA node: cuda0 → 0, 1; cuda1 → 2, 3
            assert cores == ({"0", "1"} if gpu == "cuda0" else {"2", "3"})
            agent.free(alloc)

    run(body())


def test_manual_cpu_lists_the_cores_plugins_devices():
    config = HostConfig(
        resource=ResourceConfig(allocation_mode=AllocationMode.MANUAL, reserved_cpu=("0",)),
        agents=(
            AgentConfig(AgentId("a"), AgentResources(cpu=("1", "2"), mem=4 * G)),
            AgentConfig(AgentId("b"), AgentResources(cpu=("3",), mem=4 * G)),
        ),
    )

    async def body():
        async with PartitionHost.open(config, loader=loader_with_vcpu()) as host:
            plan = host.plan()
            assert plan["agents"]["a"]["devices"]["vcpu"] == ["1", "2"]
            assert plan["agents"]["b"]["devices"]["vcpu"] == ["3"]
            assert plan["unassigned"]["vcpu"] == []

    run(body())


@pytest.mark.parametrize(
    ("devices", "told"),
    [
        ({"vcpu": ("1",)}, "'vcpu' is the cores plugin: list the agent's cores as 'cpu'"),
        ({"mem": ("root",)}, "'mem' is the memory plugin, split by amount"),
    ],
)
def test_manual_devices_may_not_name_the_cores_or_memory_plugin(devices, told):
    config = HostConfig(
        resource=ResourceConfig(allocation_mode=AllocationMode.MANUAL),
        agents=(
            AgentConfig(AgentId("a"), AgentResources(cpu=("1",), devices=devices)),
            AgentConfig(AgentId("b"), AgentResources(cpu=("2",))),
        ),
    )
    host = PartitionHost.open(config, loader=loader_with_vcpu())
    with pytest.raises(ConfigError, match=told):
        run(host.start())


def test_manual_cpu_without_a_cores_plugin():
    loader = PluginLoader(PluginSelection(configs={"mock": {"kinds": KINDS}}))
    loader.register(accelkit_mock, "mock")
    loader.build()
    config = HostConfig(
        resource=ResourceConfig(allocation_mode=AllocationMode.MANUAL),
        agents=(
            AgentConfig(AgentId("a"), AgentResources(cpu=("1",))),
            AgentConfig(AgentId("b"), AgentResources(devices={"cuda": ("cuda0",)})),
        ),
    )
    host = PartitionHost.open(config, loader=loader)
    with pytest.raises(ConfigError, match="unknown device name 'cpu': no cores plugin"):
        run(host.start())


# -- schedulers and CDI describe accelerators only -----------------------------------------------


def test_bridges_and_cdi_leave_the_cores_and_memory_plugins_out():
    config = HostConfig(resource=ResourceConfig(reserved_cpu=0))

    async def body():
        async with PartitionHost.open(config, loader=loader_with_vcpu()) as host:
            agent = host.agents[AgentId("agent-1")]
            resources = k8s_resources(agent, "accelkit.io")
            assert [r.name for r in resources] == ["accelkit.io/cuda.device"]
            gres = await gres_devices(agent, {})
            assert [(g.plugin, g.device_id, g.cores) for g in gres] == [
                ("cuda", "cuda0", (0, 1)),  # Cores= are the cores plugin's on the GPU's node
                ("cuda", "cuda1", (2, 3)),
            ]
            spec = await agent_cdi_spec(agent.agent_id, agent.contexts, "accelkit.io/agent-1")
            names = [d["name"] for d in spec["devices"]]
            assert "all" in names
            assert not any(n.startswith(("vcpu", "mem")) for n in names)
            env = " ".join(e for d in spec["devices"] for e in d["containerEdits"].get("env", []))
            assert "ROLE_TEST_DEVICES" not in env

    run(body())
