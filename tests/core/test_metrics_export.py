"""Snapshots, agent figures, and the Prometheus exposition of accelkit metrics."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from accelkit import hookimpl
from accelkit.config import HostConfig, load_host_config
from accelkit.discovery import PluginLoader
from accelkit.host import PartitionHost
from accelkit.metrics import Measurement, MetricType, NodeMetric, WorkloadMetric
from accelkit.metrics_export import (
    AgentMetric,
    MetricsGatherer,
    MetricsSnapshot,
    SnapshotCollector,
    WorkloadSample,
    agent_measurement,
    families,
    family_name,
    plugin_factor,
)
from accelkit.metrics_export.agent_share import combine, scale
from accelkit.metrics_export.prometheus import device_labels
from accelkit.plugin import AbstractComputePlugin, AbstractLifecycleHook, MaskedAgentContext
from accelkit.types import (
    AgentId,
    ComputeDevice,
    DeviceId,
    DeviceName,
    SlotName,
    Workload,
    WorkloadConfig,
)

from .metrics_support import write_node_config
from .one_device_plugin import OneDevicePlugin

D = Decimal


def reading(value: str, capacity: str | None = None) -> Measurement:
    return Measurement(D(value), None if capacity is None else D(capacity))


# -- agent figures ------------------------------------------------------------------------------


def test_agent_figures_of_whole_devices_add_up_their_readings():
    used = NodeMetric(
        "memory_used",
        MetricType.GAUGE,
        "bytes",
        reading("60", "300"),
        {"g0": reading("10", "100"), "g1": reading("20", "100"), "g2": reading("30", "100")},
    )
    share = agent_measurement(
        used, {DeviceId("g0"), DeviceId("g2")}, D("0.5"), shared_by_amount=False
    )
    assert share == (reading("40", "200"), "devices")


def test_agent_utilisation_of_whole_devices_is_their_average():
    util = NodeMetric(
        "util",
        MetricType.UTILIZATION,
        "percent",
        reading("20"),
        {"a": reading("10"), "b": reading("40")},
    )
    assert agent_measurement(util, {"a", "b"}, None, shared_by_amount=False) == (
        reading("25"),
        "devices",
    )
    assert combine(MetricType.UTILIZATION, [reading("10", "100"), reading("20", "100")]) == reading(
        "15", "100"
    )


def test_memory_shared_by_amount_is_the_node_figure_times_the_scaling_factor():
    used = NodeMetric(
        "memory_used",
        MetricType.GAUGE,
        "bytes",
        reading("100", "1000"),
        {"root": reading("100", "1000")},
    )
    share = agent_measurement(used, {"root"}, D("0.25"), shared_by_amount=True)
    assert share == (reading("25.00", "250.00"), "scaled")


def test_a_utilisation_is_never_scaled_and_missing_capacity_stays_missing():
    assert scale(MetricType.UTILIZATION, reading("40", "100"), D("0.5")) == reading("40", "100")
    assert scale(MetricType.ACCUMULATION, reading("40"), D("0.5")) == reading("20")
    assert combine(MetricType.GAUGE, [reading("1", "2"), reading("3")]) == reading("4")


def test_no_agent_figure_without_device_readings_or_a_factor():
    total = NodeMetric("total", MetricType.GAUGE, "", reading("7"))
    assert agent_measurement(total, {"a"}, None, shared_by_amount=False) is None
    assert agent_measurement(total, {"a"}, D("0.5"), shared_by_amount=False) == (
        reading("3.5"),
        "scaled",
    )


@pytest.mark.parametrize("by_amount", [False, True])
def test_an_agent_without_devices_of_the_plugin_has_no_figure_for_it(by_amount):
    util = NodeMetric(
        "util", MetricType.UTILIZATION, "percent", reading("90"), {"g0": reading("90")}
    )
    used = NodeMetric(
        "used", MetricType.GAUGE, "bytes", reading("5", "10"), {"g0": reading("5", "10")}
    )
    for metric in (util, used):  # not the other agents' load, nor "0 of 0"
        assert agent_measurement(metric, set(), D(0), shared_by_amount=by_amount) is None


def test_the_plugin_factor_is_that_of_its_first_slot():
    scaling = {
        SlotName("cuda.device"): D("0.4"),
        SlotName("cuda.mig-1g"): D("1"),
        SlotName("cpu"): D("0.5"),
    }
    assert plugin_factor(DeviceName("cuda"), scaling) == D("0.4")
    assert plugin_factor(DeviceName("cpu"), scaling) == D("0.5")
    assert plugin_factor(DeviceName("npu"), scaling) is None


# -- names and exposition -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "name"),
    [
        (("cuda", "memory_used", "bytes"), "accelkit_cuda_node_memory_used_bytes"),
        (("cuda", "memory_used", "bytes", "device"), "accelkit_cuda_device_memory_used_bytes"),
        (("mem", "used_bytes", "bytes"), "accelkit_mem_node_used_bytes"),
        (("acme-npu", "rx", "pkt/s"), "accelkit_acme_npu_node_rx_pkt_per_s"),
        (("cpu", "cpu_used", ""), "accelkit_cpu_node_cpu_used"),
        (("cpu", "cpu_used", "msec", "agent"), "accelkit_cpu_agent_cpu_used_seconds"),
        (("cuda", "power", "mW", "device"), "accelkit_cuda_device_power_watts"),
        (("cuda", "energy", "mJ"), "accelkit_cuda_node_energy_joules"),
        (("cuda", "temperature", "celsius"), "accelkit_cuda_node_temperature_celsius"),
        (
            ("cuda", "gpu_util", "percent", "device", MetricType.UTILIZATION),
            "accelkit_cuda_device_gpu_util_ratio",
        ),
        (("npu", "busy", "", "node", MetricType.UTILIZATION), "accelkit_npu_node_busy_ratio"),
    ],
)
def test_family_names_carry_prefix_plugin_level_key_and_base_unit(args, name):
    assert family_name(*args) == name


def test_capacity_goes_before_the_unit():
    name = family_name("mem", "mem_used", "bytes", "agent", capacity=True)
    assert name == "accelkit_mem_agent_mem_used_capacity_bytes"


SNAPSHOT = MetricsSnapshot(
    node={
        "cpu": [
            NodeMetric(
                "cpu_used",
                MetricType.ACCUMULATION,
                "msec",
                reading("1500.5"),
                {"0": reading("1000"), "1": reading("500.5")},
            )
        ],
        "mem": [NodeMetric("mem_used", MetricType.GAUGE, "bytes", reading("10", "100"))],
    },
    agents=[
        AgentMetric(
            AgentId("a1"),
            DeviceName("cpu"),
            "cpu_used",
            MetricType.ACCUMULATION,
            "msec",
            reading("1000"),
            "devices",
        ),
        AgentMetric(
            AgentId("a1"),
            DeviceName("mem"),
            "mem_used",
            MetricType.GAUGE,
            "bytes",
            reading("5", "50"),
            "scaled",
        ),
    ],
    workloads=[
        WorkloadSample(
            AgentId("a1"),
            DeviceName("mem"),
            WorkloadMetric("mem_used", "gauge", "bytes", "w1", reading("3")),
        )
    ],
    errors={"cuda": "RuntimeError: NVML went away"},
)


def exposition(snapshot: MetricsSnapshot, devices=None) -> dict[str, Any]:
    registry = CollectorRegistry(auto_describe=False)
    source = None if devices is None else (lambda: devices)
    registry.register(SnapshotCollector(lambda: snapshot, source))
    text = generate_latest(registry).decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_the_exposition_parses_with_one_family_per_level_in_base_units():
    found = exposition(SNAPSHOT)
    assert set(found) == {
        "accelkit_cpu_node_cpu_used_seconds",
        "accelkit_cpu_device_cpu_used_seconds",
        "accelkit_mem_node_mem_used_bytes",
        "accelkit_mem_node_mem_used_capacity_bytes",
        "accelkit_cpu_agent_cpu_used_seconds",
        "accelkit_mem_agent_mem_used_bytes",
        "accelkit_mem_agent_mem_used_capacity_bytes",
        "accelkit_mem_workload_mem_used_bytes",
    }
    counter = found["accelkit_cpu_device_cpu_used_seconds"]
    assert counter.type == "counter"
    assert [(s.name, s.labels, s.value) for s in counter.samples] == [
        (
            "accelkit_cpu_device_cpu_used_seconds_total",
            {"plugin": "cpu", "device": "0"},
            1.0,
        ),
        (
            "accelkit_cpu_device_cpu_used_seconds_total",
            {"plugin": "cpu", "device": "1"},
            0.5005,
        ),
    ]
    assert found["accelkit_mem_node_mem_used_bytes"].type == "gauge"
    (agent,) = found["accelkit_mem_agent_mem_used_capacity_bytes"].samples
    assert agent.labels == {"plugin": "mem", "agent": "a1"}
    assert agent.value == 50.0
    (workload,) = found["accelkit_mem_workload_mem_used_bytes"].samples
    assert workload.labels == {"plugin": "mem", "agent": "a1", "workload": "w1"}


def _gpu_snapshot() -> MetricsSnapshot:
    return MetricsSnapshot(
        node={
            "cuda": [
                NodeMetric(
                    "gpu_util",
                    MetricType.UTILIZATION,
                    "percent",
                    reading("50", "100"),
                    {"cuda0": reading("80", "100"), "cuda1-mig1": reading("20")},
                ),
                NodeMetric(
                    "power", MetricType.GAUGE, "mW", reading("250000", "400000"),
                    {"cuda0": reading("250000", "400000")},
                ),
            ],
            "cpu": [
                NodeMetric(
                    "cpu_util",
                    MetricType.UTILIZATION,
                    "percent",
                    reading("350", "800"),  # eight cores, three and a half of them busy
                    {"0": reading("100", "100")},
                )
            ],
        }
    )  # fmt: skip


def test_utilisations_are_ratios_and_power_is_in_watts():
    found = exposition(_gpu_snapshot())
    node = found["accelkit_cpu_node_cpu_util_ratio"].samples
    assert [s.value for s in node] == [0.4375]
    per_gpu = {
        s.labels["device"]: s.value for s in found["accelkit_cuda_device_gpu_util_ratio"].samples
    }
    assert per_gpu == {"cuda0": 0.8, "cuda1-mig1": 0.2}
    assert "accelkit_cuda_device_gpu_util_capacity_ratio" not in found
    assert [s.value for s in found["accelkit_cuda_device_power_watts"].samples] == [250.0]
    capacity = found["accelkit_cuda_device_power_capacity_watts"].samples
    assert [s.value for s in capacity] == [400.0]


def test_device_series_carry_the_labels_dcgm_exporter_users_join_on():
    gpu = ComputeDevice(
        "cuda",
        "cuda0",
        "0000:3b:00.0",
        0,
        80 * 2**30,
        132,
        "NVIDIA H100 80GB HBM3",
        "GPU-aaa",
        extra={
            "index": "0", "minor": "0", "pci_bus_id": "00000000:3B:00.0", "serial": "1650921000001"
        },
    )  # fmt: skip
    mig = ComputeDevice(
        "cuda", "cuda1-mig1", "0000:86:00.0/gi1/ci0", 1, 10 * 2**30, 16, "NVIDIA H100 MIG 1g.10gb",
        "MIG-bbb",
        extra={
            "index": "1", "pci_bus_id": "00000000:86:00.0", "parent_uuid": "GPU-ccc",
            "parent_model": "NVIDIA H100 80GB HBM3", "mig_profile": "1g.10gb",
            "gpu_instance_id": "1",
        },
    )  # fmt: skip
    found = exposition(_gpu_snapshot(), {"cuda": [gpu, mig], "cpu": []})
    labels = {
        s.labels["device"]: s.labels for s in found["accelkit_cuda_device_gpu_util_ratio"].samples
    }
    assert labels["cuda0"] == {
        "plugin": "cuda",
        "device": "cuda0",
        "gpu": "0",
        "UUID": "GPU-aaa",
        "pci_bus_id": "00000000:3B:00.0",
        "serial": "1650921000001",
        "model_name": "NVIDIA H100 80GB HBM3",
    }
    assert labels["cuda1-mig1"] == {
        "plugin": "cuda",
        "device": "cuda1-mig1",
        "gpu": "1",
        "UUID": "GPU-ccc",
        "pci_bus_id": "00000000:86:00.0",
        "model_name": "NVIDIA H100 80GB HBM3",
        "GPU_I_PROFILE": "1g.10gb",
        "GPU_I_ID": "1",
    }
    cpu = ComputeDevice("cpu", "0", "cpu0", 0, 0, 1, "Xeon")
    assert device_labels(cpu) == {}  # the labels are those of GPUs
    # node series are not per device and carry no device labels
    (node,) = found["accelkit_cuda_node_gpu_util_ratio"].samples
    assert node.labels == {"plugin": "cuda"}


def test_a_key_that_starts_with_a_level_never_merges_two_families():
    snapshot = MetricsSnapshot(
        node={
            "npu": [
                NodeMetric("device_temp", MetricType.GAUGE, "celsius", reading("40")),
                NodeMetric(
                    "temp", MetricType.GAUGE, "celsius", reading("41"), {"n0": reading("41")}
                ),
            ]
        }
    )
    found = exposition(snapshot)
    assert set(found) == {
        "accelkit_npu_node_device_temp_celsius",
        "accelkit_npu_node_temp_celsius",
        "accelkit_npu_device_temp_celsius",
    }


def test_a_family_claimed_by_two_metrics_keeps_the_first_and_logs_the_other(caplog):
    snapshot = MetricsSnapshot(
        node={
            "npu": [
                NodeMetric("busy", MetricType.GAUGE, "ms", reading("1000")),
                NodeMetric("busy_seconds", MetricType.GAUGE, "s", reading("7")),
            ]
        }
    )
    found = exposition(snapshot)
    assert [s.value for s in found["accelkit_npu_node_busy_seconds"].samples] == [1.0]
    assert "busy_seconds of npu is left out" in caplog.text


def test_families_of_an_empty_snapshot_are_none():
    assert families(MetricsSnapshot()) == []


def test_snapshot_json_uses_decimal_strings():
    data = SNAPSHOT.as_json()
    assert data["node"]["cpu"][0] == {
        "key": "cpu_used",
        "type": "accumulation",
        "unit": "msec",
        "value": "1500.5",
        "capacity": None,
        "per_device": {
            "0": {"value": "1000", "capacity": None},
            "1": {"value": "500.5", "capacity": None},
        },
        "aggregate": "sum",
    }
    assert data["agents"]["a1"]["mem"] == [
        {
            "key": "mem_used",
            "type": "gauge",
            "unit": "bytes",
            "value": "5",
            "capacity": "50",
            "basis": "scaled",
        }
    ]
    assert data["workloads"] == {
        "a1": {
            "w1": {
                "mem": [
                    {
                        "key": "mem_used",
                        "type": "gauge",
                        "unit": "bytes",
                        "value": "3",
                        "capacity": None,
                    }
                ]
            }
        }
    }
    assert data["errors"] == {"cuda": "RuntimeError: NVML went away"}


# -- gathering from a real partition host ------------------------------------------------------


def gather(
    config: HostConfig, loader: PluginLoader | None = None, **kwargs: Any
) -> MetricsSnapshot:
    async def once() -> MetricsSnapshot:
        async with PartitionHost.open(config, loader=loader) as host:
            gatherer = MetricsGatherer(host, **kwargs)
            await gatherer.gather()
            return await gatherer.gather()

    return asyncio.run(once())


def test_agents_get_their_devices_readings_and_their_share_of_memory(tmp_path):
    snapshot = gather(load_host_config(write_node_config(tmp_path)))
    assert set(snapshot.node) == {"cpu", "mem", "cuda"}
    cuda = {m.key: m for m in snapshot.node["cuda"]}["memory_used"]
    mem = {m.key: m for m in snapshot.node["mem"]}["memory_used"]
    agents = {(a.agent_id, a.device_name, a.key): a for a in snapshot.agents}
    first = agents["agent-1", "cuda", "memory_used"]
    assert first.basis == "devices"
    assert first.value.value == cuda.per_device["cuda0"].value + cuda.per_device["cuda1"].value
    second = agents["agent-2", "mem", "memory_used"]
    assert second.basis == "scaled"
    assert second.value == Measurement(mem.node.value * D("0.5"), mem.node.capacity * D("0.5"))
    assert snapshot.errors == {}


class Hook(AbstractLifecycleHook):
    async def pre_create(self) -> WorkloadConfig:
        return WorkloadConfig()


class Context(MaskedAgentContext):
    async def gather_workload_metrics(
        self, ctx: Any, workload: Workload
    ) -> Sequence[WorkloadMetric]:
        if workload.id == "broken":
            msg = "cgroup vanished"
            raise OSError(msg)
        return [WorkloadMetric("used", "gauge", "", workload.id, Measurement(1))]


class NPU(OneDevicePlugin):
    key = DeviceName("npu")
    broken = False

    def create_lifecycle_hook(self, workload: Any, device_alloc: Any, devices: Any) -> Hook:
        return Hook(workload, device_alloc, devices=devices)

    def create_agent_context(self, agent_id: Any, partition: Any) -> Context:
        return Context(self, agent_id, partition)

    async def gather_node_metrics(self, ctx: Any) -> Sequence[NodeMetric]:
        if self.broken:
            msg = "driver reset"
            raise RuntimeError(msg)
        return [
            NodeMetric("util", "utilization", "percent", Measurement(5), {"npu0": Measurement(5)})
        ]


class Distribution:
    def __init__(self, *plugins: AbstractComputePlugin) -> None:
        self.plugins = plugins

    @hookimpl
    def accelkit_compute_plugins(self) -> Sequence[AbstractComputePlugin]:
        return self.plugins


def loader_of(*plugins: AbstractComputePlugin) -> PluginLoader:
    loader = PluginLoader()
    for i, plugin in enumerate(plugins):
        loader.register(Distribution(plugin), f"dist{i}")
    loader.build()
    return loader


def test_a_plugin_whose_gather_raises_is_named_and_the_others_still_report():
    class Broken(NPU):
        key = DeviceName("tpu")
        broken = True

    snapshot = gather(HostConfig(), loader_of(NPU({}), Broken({})))
    assert set(snapshot.node) == {"npu"}
    assert snapshot.errors == {"tpu": "RuntimeError: driver reset"}
    (agent,) = snapshot.agents
    assert (agent.agent_id, agent.key, agent.value, agent.basis) == (
        "agent-1",
        "util",
        Measurement(5),
        "devices",
    )


def test_workload_metrics_are_gathered_per_agent_and_failures_are_named():
    workloads = {
        AgentId("agent-1"): [Workload.process_tree("w1"), Workload.process_tree("broken")],
        AgentId("agent-9"): [Workload.process_tree("w2")],
    }
    snapshot = gather(HostConfig(), loader_of(NPU({})), workloads=workloads)
    assert [(w.agent_id, w.device_name, w.metric.workload_id) for w in snapshot.workloads] == [
        ("agent-1", "npu", "w1")
    ]
    assert snapshot.errors == {"npu": "OSError: cgroup vanished"}


_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


@given(
    keys=st.lists(st.from_regex(r"[a-z][a-z0-9_]{0,12}", fullmatch=True), min_size=1, max_size=4),
    unit=st.sampled_from(["percent", "msec", "mW", "mJ", "bytes", "celsius", "", "pkt/s"]),
    kind=st.sampled_from(list(MetricType)),
    value=st.integers(0, 10**6),
    cores=st.integers(1, 256),
)
def test_any_snapshot_exposes_valid_names_and_ratios_within_0_and_1(keys, unit, kind, value, cores):
    capacity = 100 * cores
    metrics = [
        NodeMetric(k, kind, unit, reading(str(min(value, capacity)), str(capacity)),
                   {"d0": reading(str(min(value, capacity)), str(capacity))})
        for k in dict.fromkeys(keys)
    ]  # fmt: skip
    found = families(MetricsSnapshot(node={"npu": metrics}))
    names = [f.name for f in found]
    assert len(names) == len(set(names))
    for family in found:
        assert _NAME.fullmatch(family.name)
        assert not family.name.endswith("_total")  # prometheus-client adds it to the samples
        for sample in family.samples:
            if kind is MetricType.UTILIZATION:
                assert family.name.endswith("_ratio")
                assert 0 <= sample.value <= 1
            if kind is MetricType.ACCUMULATION and "_capacity" not in family.name:
                assert sample.name.endswith("_total")
