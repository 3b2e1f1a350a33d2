"""PartitionHost and the agent views on mock devices and hand-made plugins."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from decimal import Decimal

import pytest

import accelkit_mock
from accelkit import hookimpl
from accelkit.config import AgentConfig, AgentResources, AllocationMode, HostConfig, ResourceConfig
from accelkit.discovery import PluginLoader
from accelkit.errors import (
    ConfigError,
    InsufficientResource,
    InvalidResourceArgument,
    PluginContractError,
    PluginLoadError,
)
from accelkit.host import PartitionHost, allocation_order, plugin_key_of
from accelkit.plugin import (
    AbstractAgentContext,
    AbstractComputePlugin,
    MaskedAgentContext,
    PluginRole,
)
from accelkit.selection import PluginSelection
from accelkit.types import AgentId, ComputeDevice, DeviceId, DeviceName, DeviceSlotInfo

G = 1024**3


def kinds(cores=8, gpus=4, mem="16G"):
    return [
        {
            "key": "cpu",
            "devices": [{"id": str(i), "numa-node": i // (cores // 2 or 1)} for i in range(cores)],
        },
        {"key": "mem", "devices": [{"id": "root", "memory": mem}]},
        {
            "key": "cuda",
            "devices": [
                {"id": f"cuda{i}", "numa-node": i // (gpus // 2 or 1)} for i in range(gpus)
            ],
        },
    ]


def loader_for(kind_list, *providers, strict=False):
    loader = PluginLoader(PluginSelection(strict=strict, configs={"mock": {"kinds": kind_list}}))
    loader.register(accelkit_mock, "mock")
    for name, provider in providers:
        loader.register(provider, name)
    loader.build()
    return loader


def config(mode=AllocationMode.AUTO_SPLIT, agents=2, **resource):
    base = HostConfig(resource=ResourceConfig(allocation_mode=mode, **resource))
    return base.with_agent_count(agents)


def run(coro):
    return asyncio.run(coro)


def allocated(host):
    """Everything allocated on the node, per plugin key, zeros dropped."""
    maps = {
        id(c.alloc_map): (k, c.alloc_map)
        for a in host.agents.values()
        for k, c in a.contexts.items()
    }
    result = {}
    for key, alloc_map in maps.values():
        for per_device in alloc_map.allocations.values():
            for device, amount in per_device.items():
                if amount:
                    result.setdefault(key, {})[device] = amount
    return result


# -- slot routing and order -----------------------------------------------------------------


SHIPPED_ROLES = {"cpu": PluginRole.CORES, "mem": PluginRole.MEMORY, "cuda": PluginRole.ACCELERATOR}


def test_slots_route_to_their_plugin():
    assert plugin_key_of("cpu", SHIPPED_ROLES) == "cpu"
    assert plugin_key_of("mem", SHIPPED_ROLES) == "mem"
    assert plugin_key_of("cuda.device", SHIPPED_ROLES) == "cuda"
    assert plugin_key_of("cuda.mig-1g.10gb", SHIPPED_ROLES) == "cuda"


def test_bare_slots_route_to_the_plugin_of_their_role_whatever_its_key():
    roles = {"vcpu": PluginRole.CORES, "ram": PluginRole.MEMORY, "cpu": PluginRole.ACCELERATOR}
    assert plugin_key_of("cpu", roles) == "vcpu"
    assert plugin_key_of("mem", roles) == "ram"
    assert plugin_key_of("cpu.device", roles) == "cpu"
    assert plugin_key_of("mem", {}) == "mem"  # nobody offers it: the caller says so


def test_allocation_order_is_accelerators_then_cores_then_memory():
    roles = {
        "mem": PluginRole.MEMORY,
        "cpu": PluginRole.CORES,
        "rocm": PluginRole.ACCELERATOR,
        "npu10": PluginRole.ACCELERATOR,
        "cuda": PluginRole.ACCELERATOR,
        "npu2": PluginRole.ACCELERATOR,
    }
    assert allocation_order(roles) == ["cuda", "npu2", "npu10", "rocm", "cpu", "mem"]
    by_role = {"aaa": PluginRole.MEMORY, "bbb": PluginRole.CORES, "zzz": PluginRole.ACCELERATOR}
    assert allocation_order(by_role) == ["zzz", "bbb", "aaa"]


# -- opening and closing ----------------------------------------------------------------------


def test_open_without_config_uses_defaults_and_one_agent():
    async def body():
        async with PartitionHost.open(loader=loader_for(kinds())) as host:
            assert list(host.agents) == ["agent-1"]
            assert host.result.mode is AllocationMode.SHARED
            assert host.agents[AgentId("agent-1")].scaling_factors() == {
                "cpu": 1,
                "mem": 1,
                "cuda.device": 1,
            }

    run(body())


def test_result_before_start_is_an_error():
    host = PartitionHost.open(config(), loader=loader_for(kinds()))
    with pytest.raises(RuntimeError, match="not started"):
        _ = host.result


def test_autosplit_agents_see_only_their_devices():
    async def body():
        async with PartitionHost.open(config(agents=2), loader=loader_for(kinds())) as host:
            one, two = host.agents[AgentId("agent-1")], host.agents[AgentId("agent-2")]
            assert one.device_ids() == {
                "cuda": ["cuda0", "cuda1"],
                "cpu": ["1", "2", "3", "4"],
                "mem": ["root"],
            }
            assert two.device_ids()["cpu"] == ["5", "6", "7"]
            assert two.available_slots() == {"cuda.device": 2, "cpu": 3, "mem": 7680 * 1024**2}
            assert one.scaling_factors()["cpu"] == Decimal("0.571428571428")
            got = two.allocate({"cuda.device": Decimal(2)})
            assert set(got["cuda"]["cuda.device"]) == {"cuda2", "cuda3"}
            with pytest.raises(InsufficientResource):
                two.allocate({"cuda.device": Decimal(1)})
            assert one.allocate({"cuda.device": Decimal(2)})  # agent-1's GPUs are untouched
            assert repr(one) == "<AgentView 'agent-1' plugins=['cuda', 'cpu', 'mem']>"

    run(body())


def test_shared_agents_use_one_map_per_plugin_and_never_double_allocate():
    async def body():
        cfg = config(AllocationMode.SHARED, agents=3)
        async with PartitionHost.open(cfg, loader=loader_for(kinds())) as host:
            views = list(host.agents.values())
            for key in ("cpu", "mem", "cuda"):
                assert len({id(v.contexts[key].alloc_map) for v in views}) == 1
            views[0].allocate({"cuda.device": Decimal(3)})
            views[1].allocate({"cuda.device": Decimal(1)})
            with pytest.raises(InsufficientResource):
                views[2].allocate({"cuda.device": Decimal(1)})
            assert sum(allocated(host)["cuda"].values()) == 4

    run(body())


def test_allocation_passes_the_numa_nodes_taken_to_the_next_plugin():
    async def body():
        cfg = config(AllocationMode.SHARED, agents=2, reserved_cpu=0)
        async with PartitionHost.open(cfg, loader=loader_for(kinds())) as host:
            view = host.agents[AgentId("agent-1")]
            got = view.allocate({"cpu": Decimal(2), "cuda.device": Decimal(1), "mem": Decimal(G)})
            assert list(got) == ["cuda", "cpu", "mem"]
            gpu = next(iter(got["cuda"]["cuda.device"]))
            gpu_node = {d.device_id: d.numa_node for d in view.contexts["cuda"].devices}[gpu]
            cpu_nodes = {d.device_id: d.numa_node for d in view.contexts["cpu"].devices}
            assert {cpu_nodes[c] for c in got["cpu"]["cpu"]} == {gpu_node}
            # a second request lands on the other node's GPU and follows it with the cores
            got2 = view.allocate({"cpu": Decimal(2), "cuda.device": Decimal(2)})
            gpu_nodes = {
                {d.device_id: d.numa_node for d in view.contexts["cuda"].devices}[g]
                for g in got2["cuda"]["cuda.device"]
            }
            assert {cpu_nodes[c] for c in got2["cpu"]["cpu"]} <= gpu_nodes

    run(body())


def test_failed_allocation_rolls_every_part_back():
    async def body():
        async with PartitionHost.open(config(agents=2), loader=loader_for(kinds())) as host:
            view = host.agents[AgentId("agent-1")]
            with pytest.raises(InsufficientResource) as info:
                view.allocate(
                    {"cuda.device": Decimal(1), "cpu": Decimal(1), "mem": Decimal(64 * G)}
                )
            assert info.value.slot == "mem"
            assert allocated(host) == {}

    run(body())


def test_rollback_also_happens_on_errors_that_are_not_resource_errors(monkeypatch):
    async def body():
        async with PartitionHost.open(config(agents=2), loader=loader_for(kinds())) as host:
            view = host.agents[AgentId("agent-1")]
            mem_map = view.contexts["mem"].alloc_map

            def broken(*args, **kwargs):
                raise RuntimeError("driver went away")

            monkeypatch.setattr(mem_map, "allocate", broken)
            with pytest.raises(RuntimeError, match="driver went away"):
                view.allocate({"cuda.device": Decimal(1), "cpu": Decimal(2), "mem": Decimal(G)})
            assert allocated(host) == {}

    run(body())


def test_a_failing_rollback_is_logged_and_the_original_error_kept(monkeypatch, caplog):
    async def body():
        async with PartitionHost.open(config(agents=2), loader=loader_for(kinds())) as host:
            view = host.agents[AgentId("agent-1")]

            def broken_free(alloc):
                raise RuntimeError("cannot free")

            monkeypatch.setattr(view.contexts["cuda"].alloc_map, "free", broken_free)
            with pytest.raises(InsufficientResource):
                view.allocate({"cuda.device": Decimal(1), "cpu": Decimal(99)})
            assert "rolling back cuda failed" in caplog.text

    run(body())


def test_unknown_slot_is_refused_before_anything_is_allocated():
    async def body():
        async with PartitionHost.open(config(agents=2), loader=loader_for(kinds())) as host:
            view = host.agents[AgentId("agent-1")]
            with pytest.raises(
                InvalidResourceArgument, match=r"no plugin offers slot 'rocm\.device'"
            ):
                view.allocate({"cuda.device": Decimal(1), "rocm.device": Decimal(1)})
            with pytest.raises(InsufficientResource, match=r"no device offers slot 'cuda\.shares'"):
                view.allocate({"cpu": Decimal(1), "cuda.shares": Decimal(1)})
            assert allocated(host) == {}

    run(body())


def test_free_returns_an_allocation_and_zero_requests_are_dropped():
    async def body():
        async with PartitionHost.open(config(agents=2), loader=loader_for(kinds())) as host:
            view = host.agents[AgentId("agent-2")]
            got = view.allocate({"cuda.device": Decimal(0), "cpu": Decimal(2), "mem": Decimal(G)})
            assert list(got) == ["cpu", "mem"]
            view.free(got)
            assert allocated(host) == {}
            with pytest.raises(InvalidResourceArgument, match="has no plugin 'rocm'"):
                view.free({DeviceName("rocm"): {}})

    run(body())


def test_a_refused_free_frees_nothing_so_a_retry_cannot_take_another_agents_share():
    async def body():
        cfg = config(AllocationMode.SHARED, agents=2)
        async with PartitionHost.open(cfg, loader=loader_for(kinds())) as host:
            a, b = host.agents[AgentId("agent-1")], host.agents[AgentId("agent-2")]
            got = a.allocate({"cuda.device": Decimal(1), "mem": Decimal(G)})
            [held] = got[DeviceName("cuda")]["cuda.device"]
            wrong = next(d for d in ("cuda0", "cuda1") if d != held)
            bad = {**got, DeviceName("cuda"): {"cuda.device": {wrong: Decimal(1)}}}
            before = allocated(host)
            with pytest.raises(InvalidResourceArgument):
                a.free(bad)  # mem would be freed first; the cuda part is refused
            assert allocated(host) == before
            b.allocate({"mem": Decimal(G)})
            a.free(got)
            assert allocated(host) == {"mem": {"root": Decimal(G)}}  # b's share stays

    run(body())


def test_free_refuses_devices_outside_the_agents_mask_before_freeing_anything():
    async def body():
        async with PartitionHost.open(config(agents=2), loader=loader_for(kinds())) as host:
            a = host.agents[AgentId("agent-1")]
            got = a.allocate({"cpu": Decimal(1), "mem": Decimal(G)})
            foreign = {**got, DeviceName("cpu"): {"cpu": {"7": Decimal(1)}}}
            before = allocated(host)
            with pytest.raises(InvalidResourceArgument, match="outside"):
                a.free(foreign)
            assert allocated(host) == before

    run(body())


def test_affinity_policy_comes_from_the_config_and_can_be_overridden():
    async def body():
        cfg = config(AllocationMode.SHARED, agents=2, reserved_cpu=0)
        cfg = cfg.with_mode(AllocationMode.SHARED)
        async with PartitionHost.open(cfg, loader=loader_for(kinds())) as host:
            view = host.agents[AgentId("agent-1")]
            assert view.affinity_policy.value == "prefer-single-node"
            got = view.allocate({"cpu": Decimal(4)}, affinity_policy="interleaved")
            nodes = {d.device_id: d.numa_node for d in view.contexts["cpu"].devices}
            assert {nodes[c] for c in got["cpu"]["cpu"]} == {0, 1}

    run(body())


# -- hand-made plugins: failures on the way up and down --------------------------------------


class Recorder:
    def __init__(self):
        self.events = []


class FakePlugin(AbstractComputePlugin):
    key = DeviceName("fake")

    def __init__(self, recorder, *, fail_context_for=None, key="fake"):
        super().__init__({})
        self.recorder = recorder
        self.fail_context_for = fail_context_for
        self.key = DeviceName(key)  # type: ignore[misc]

    async def init(self):
        self.recorder.events.append(("init", self.key))

    async def cleanup(self):
        self.recorder.events.append(("cleanup", self.key))

    async def list_devices(self):
        return [ComputeDevice(self.key, DeviceId(f"{self.key}{i}"), "x", 0, 0, 1) for i in range(2)]

    def configurable_slots(self):
        return []

    def device_slots(self, devices: Iterable[ComputeDevice]):
        return {d.device_id: DeviceSlotInfo("count", f"{self.key}.device", 1) for d in devices}

    def create_lifecycle_hook(self, workload, device_alloc, devices):
        raise NotImplementedError

    def create_agent_context(self, agent_id, partition):
        if agent_id == self.fail_context_for:
            raise RuntimeError(f"no context for {agent_id}")
        recorder = self.recorder

        class Context(MaskedAgentContext):
            async def close(self):
                recorder.events.append(("close", self.plugin.key, self.agent_id))

        return Context(self, agent_id, partition)


class Provider:
    def __init__(self, *plugins):
        self.plugins = plugins

    @hookimpl
    def accelkit_compute_plugins(self):
        return list(self.plugins)


def test_closing_the_host_closes_every_context_then_every_plugin():
    recorder = Recorder()
    provider = Provider(FakePlugin(recorder, key="aaa"), FakePlugin(recorder, key="bbb"))

    async def body():
        async with PartitionHost.open(config(agents=2), loader=loader_for([], ("fake", provider))):
            pass

    run(body())
    closes = [e for e in recorder.events if e[0] == "close"]
    assert len(closes) == 4
    assert recorder.events[-2:] == [("cleanup", "bbb"), ("cleanup", "aaa")]
    assert recorder.events.index(closes[-1]) < recorder.events.index(("cleanup", "bbb"))


def test_start_up_failing_halfway_closes_what_was_opened():
    recorder = Recorder()
    provider = Provider(
        FakePlugin(recorder, key="aaa"), FakePlugin(recorder, key="bbb", fail_context_for="agent-2")
    )
    host = PartitionHost.open(config(agents=2), loader=loader_for([], ("fake", provider)))

    async def body():
        async with host:
            pytest.fail("the host must not start")

    with pytest.raises(RuntimeError, match="no context for agent-2"):
        run(body())
    events = recorder.events
    assert ("close", "aaa", "agent-1") in events
    assert ("close", "bbb", "agent-1") in events
    assert ("close", "aaa", "agent-2") in events
    assert {("cleanup", "aaa"), ("cleanup", "bbb")} <= set(events)


def test_a_config_error_after_start_cleans_the_plugins_up():
    recorder = Recorder()
    cfg = HostConfig(
        resource=ResourceConfig(allocation_mode=AllocationMode.MANUAL),
        agents=(
            AgentConfig(AgentId("a"), AgentResources(devices={"aaa": ("aaa9",)})),
            AgentConfig(AgentId("b"), AgentResources(devices={"aaa": ("aaa0",)})),
        ),
    )
    provider = Provider(FakePlugin(recorder, key="aaa"))

    async def body():
        async with PartitionHost.open(cfg, loader=loader_for([], ("fake", provider))):
            pytest.fail("the host must not start")

    with pytest.raises(ConfigError, match="unknown device id 'aaa9'"):
        run(body())
    assert recorder.events == [("init", "aaa"), ("cleanup", "aaa")]


def test_a_context_that_fails_to_close_does_not_stop_the_others(caplog):
    recorder = Recorder()

    class Sticky(FakePlugin):
        def create_agent_context(self, agent_id, partition):
            ctx = super().create_agent_context(agent_id, partition)

            async def close():
                raise OSError("stuck")

            ctx.close = close  # type: ignore[method-assign]
            return ctx

    provider = Provider(Sticky(recorder, key="aaa"), FakePlugin(recorder, key="bbb"))

    async def body():
        async with PartitionHost.open(config(agents=2), loader=loader_for([], ("fake", provider))):
            pass

    run(body())
    assert len([e for e in recorder.events if e[0] == "close"]) == 2
    assert ("cleanup", "aaa") in recorder.events
    assert "closing" in caplog.text


def test_failed_plugins_are_warned_about_and_fail_start_up_when_strict():
    class Broken:
        @hookimpl
        def accelkit_compute_plugins(self):
            raise ValueError("bad firmware")

    async def body(strict):
        loader = loader_for(kinds(), ("broken", Broken()), strict=strict)
        async with PartitionHost.open(config(agents=2), loader=loader) as host:
            return host.plan()["warnings"], host.warnings

    plan_warnings, warnings = run(body(False))
    assert plan_warnings == ["plugin 'broken' failed: ValueError: bad firmware"]
    assert warnings == plan_warnings
    with pytest.raises(PluginLoadError, match="bad firmware"):
        run(body(True))


def test_shared_mode_needs_contexts_that_can_share_a_map():
    class Plain(AbstractAgentContext):
        def __init__(self, plugin, agent_id, partition):
            self.plugin = plugin
            self.agent_id = agent_id
            self.partition = partition
            self._map = plugin.create_alloc_map(
                plugin.device_slots(plugin.devices), partition.device_mask
            )

        @property
        def alloc_map(self):
            return self._map

        def list_devices(self):
            return self.plugin.devices

        def available_slots(self):
            return {}

        def create_alloc_map(self):
            return self._map

        def create_lifecycle_hook(self, workload, device_alloc):
            raise NotImplementedError

        def alloc_to_devices(self, device_alloc):
            return ()

    class Odd(FakePlugin):
        def create_agent_context(self, agent_id, partition):
            return Plain(self, agent_id, partition)

    provider = Provider(Odd(Recorder(), key="odd"))

    async def body():
        cfg = config(AllocationMode.SHARED, agents=2)
        async with PartitionHost.open(cfg, loader=loader_for([], ("odd", provider))):
            pytest.fail("the host must not start")

    with pytest.raises(PluginContractError, match="cannot share an alloc map"):
        run(body())
