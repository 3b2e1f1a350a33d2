"""How a metric adds up per agent (``NodeMetric.aggregate``) and per-GPU readings of MIG parents."""

from __future__ import annotations

from decimal import Decimal

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from accelkit.cli.metrics_cmd import metrics_table
from accelkit.metrics import Aggregate, Measurement, MetricType, NodeMetric
from accelkit.metrics_export import MetricsSnapshot, SnapshotCollector
from accelkit.metrics_export.agent_share import BASIS_DEVICES, agent_measurement, scale
from accelkit.testing.metric_rules import node_metric_problems
from accelkit.types import ComputeDevice, DeviceId

TEMPS = st.lists(st.integers(min_value=-40, max_value=120), min_size=1, max_size=8)


def temperature(values: list[int]) -> NodeMetric:
    per_device = {f"cuda{i}": Measurement(v) for i, v in enumerate(values)}
    return NodeMetric(
        "temperature", "gauge", "celsius", Measurement(max(values)), per_device, "max"
    )


@given(TEMPS)
def test_an_agent_s_temperature_is_its_hottest_device_never_a_sum(values):
    metric = temperature(values)
    found = agent_measurement(metric, set(metric.per_device), None, shared_by_amount=False)
    assert found == (Measurement(max(values)), BASIS_DEVICES)


@given(st.lists(st.integers(min_value=0, max_value=10**6), min_size=1, max_size=8))
def test_undeclared_metrics_keep_their_old_sums_and_means(values):
    per_device = {f"d{i}": Measurement(v, 100) for i, v in enumerate(values)}
    gauge = NodeMetric("power", MetricType.GAUGE, "W", Measurement(sum(values)), per_device)
    util = NodeMetric("util", MetricType.UTILIZATION, "percent", Measurement(0), per_device)
    assert (gauge.aggregate, gauge.adds_up_by, util.adds_up_by) == (
        None, Aggregate.SUM, Aggregate.MEAN,
    )  # fmt: skip
    ids = set(per_device)
    summed = agent_measurement(gauge, ids, None, shared_by_amount=False)
    averaged = agent_measurement(util, ids, None, shared_by_amount=False)
    assert summed is not None
    assert summed[0] == Measurement(sum(values), 100 * len(values))
    assert averaged is not None
    assert averaged[0].value == Decimal(sum(values)) / len(values)


def test_a_declared_mean_averages_a_gauge():
    per_device = {"c0": Measurement(1000), "c1": Measurement(2000)}
    clock = NodeMetric("sm_clock", "gauge", "MHz", Measurement(1500), per_device, Aggregate.MEAN)
    found = agent_measurement(clock, {"c0", "c1"}, None, shared_by_amount=False)
    assert found == (Measurement(1500), BASIS_DEVICES)


def test_a_maximum_or_mean_is_never_scaled_by_a_factor():
    reading = Measurement(70, 90)
    assert scale(MetricType.GAUGE, reading, Decimal("0.5"), Aggregate.MAX) == reading
    assert scale(MetricType.GAUGE, reading, Decimal("0.5"), Aggregate.MEAN) == reading
    assert scale(MetricType.GAUGE, reading, Decimal("0.5")) == Measurement(35, 45)


def test_an_unknown_aggregate_is_refused_naming_it():
    with pytest.raises(ValueError, match="'median'"):
        NodeMetric("t", "gauge", "celsius", Measurement(1), {}, "median")


def test_a_mig_parent_gets_per_gpu_series_with_its_own_labels():
    mig = ComputeDevice(
        "cuda", "cuda1-mig1", "0000:86:00.0/gi1/ci0", 1, 2**30, 16, "NVIDIA H100 MIG 1g.10gb",
        "MIG-bbb",
        extra={"index": "1", "pci_bus_id": "00000000:86:00.0", "parent_uuid": "GPU-ccc",
               "parent_id": "cuda1", "parent_model": "NVIDIA H100", "mig_profile": "1g.10gb",
               "gpu_instance_id": "1"},
    )  # fmt: skip
    power = NodeMetric(
        "power", "gauge", "mW", Measurement(60000, 700000), {}, "sum",
        per_parent={"cuda1": Measurement(60000, 700000)},
    )  # fmt: skip
    used = NodeMetric(
        "mem_used", "gauge", "bytes", Measurement(3), {DeviceId("cuda1-mig1"): Measurement(3)}
    )
    snapshot = MetricsSnapshot(node={"cuda": [power, used]})
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(lambda: snapshot, lambda: {"cuda": [mig]}))
    found = {f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())}
    (gpu,) = found["accelkit_cuda_device_power_watts"].samples
    assert gpu.labels == {
        "plugin": "cuda", "device": "cuda1", "gpu": "1", "UUID": "GPU-ccc",
        "pci_bus_id": "00000000:86:00.0", "model_name": "NVIDIA H100",
    }  # fmt: skip
    assert gpu.value == 60.0
    (instance,) = found["accelkit_cuda_device_mem_used_bytes"].samples
    assert instance.labels["GPU_I_ID"] == "1"
    assert instance.labels["UUID"] == gpu.labels["UUID"]  # the join key DCGM uses


def test_json_and_the_table_show_the_aggregate_and_the_mig_parent():
    power = NodeMetric(
        "power", "gauge", "mW", Measurement(60000), {}, "sum",
        per_parent={"cuda1": Measurement(60000, 700000)},
    )  # fmt: skip
    snapshot = MetricsSnapshot(node={"cuda": [power, temperature([40, 70])]})
    data = snapshot.as_json()["node"]["cuda"]
    assert data[0]["per_parent"] == {"cuda1": {"value": "60000", "capacity": "700000"}}
    assert [m["aggregate"] for m in data] == ["sum", "max"]
    assert "per_parent" not in data[1]
    console = Console(width=200, record=True)
    console.print(metrics_table(snapshot))
    assert "device cuda1 (parent)" in console.export_text()


def test_the_kit_refuses_a_parent_reading_of_a_device():
    metric = NodeMetric(
        "power", "gauge", "mW", Measurement(1), {"cuda0": Measurement(1)}, "sum",
        per_parent={"cuda0": Measurement(1), "cuda1": Measurement(2)},
    )  # fmt: skip
    assert node_metric_problems([metric], {"cuda0"}) == [
        "metric 'power' has a per_parent reading for 'cuda0', which is one of the plugin's "
        "devices: its reading belongs in per_device"
    ]
    assert node_metric_problems([attrs.evolve(metric, per_parent={"cuda1": Measurement(2)})],
                                {"cuda0"}) == []  # fmt: skip
