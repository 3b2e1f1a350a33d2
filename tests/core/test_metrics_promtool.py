"""``promtool check metrics`` (Prometheus' own linter) on accelkit's exposition.

It finds nothing, GPU series included: the labels queries join DCGM exporter's series on keep
DCGM's spelling (``gpu``, ``UUID``, ``pci_bus_id``, ``GPU_I_PROFILE``, ``GPU_I_ID``), which the
linter accepts; the product name is ``model_name`` (DCGM's ``modelName`` is camelCase, a
finding). Skipped, saying why, where promtool is not installed (Debian: ``apt-get install
prometheus``).
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from accelkit.cli.app import main
from accelkit.metrics import Measurement, MetricType, NodeMetric, WorkloadMetric
from accelkit.metrics_export import MetricsSnapshot, SnapshotCollector, WorkloadSample
from accelkit.types import AgentId, ComputeDevice, DeviceName

from .metrics_support import write_node_config

PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (apt-get install prometheus)"
)


CAMEL_CASE = "label names should be written in 'snake_case' not 'camelCase'"


def promtool_findings(text: str) -> list[str]:
    assert PROMTOOL is not None
    result = subprocess.run(
        [PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    findings = (result.stdout + result.stderr).strip().splitlines()
    assert bool(findings) == (result.returncode != 0), result
    return findings


def test_the_exposition_of_a_mock_node_passes_promtool(tmp_path, capsys):
    config = str(write_node_config(tmp_path))
    assert main(["metrics", "--config", config, "--prometheus"]) == 0
    text = capsys.readouterr().out
    assert "accelkit_cpu_node_utilization_ratio" in text
    assert "accelkit_mem_node_memory_used_capacity_bytes" in text
    assert promtool_findings(text) == []


def test_gpu_series_with_dcgm_labels_pass_promtool():
    gpu = ComputeDevice(
        "cuda", "cuda0", "0000:3b:00.0", 0, 2**30, 132, "NVIDIA H100", "GPU-aaa",
        extra={"index": "0", "pci_bus_id": "00000000:3B:00.0"},
    )  # fmt: skip
    mig = ComputeDevice(
        "cuda", "cuda1-mig1", "0000:86:00.0/gi1/ci0", 1, 2**30, 16, "NVIDIA H100 MIG 1g.10gb",
        "MIG-bbb",
        extra={"index": "1", "pci_bus_id": "00000000:86:00.0", "parent_uuid": "GPU-ccc",
               "parent_id": "cuda1", "mig_profile": "1g.10gb", "gpu_instance_id": "1"},
    )  # fmt: skip
    snapshot = MetricsSnapshot(
        node={
            "cuda": [
                NodeMetric("gpu_util", MetricType.UTILIZATION, "percent", Measurement(5, 100),
                           {"cuda0": Measurement(5, 100)}),
                NodeMetric("power", MetricType.GAUGE, "mW", Measurement(70000, 700000),
                           {"cuda0": Measurement(70000, 700000)},
                           per_parent={"cuda1": Measurement(60000, 700000)}),
                NodeMetric("mem_used", MetricType.GAUGE, "bytes", Measurement(5, 10),
                           {"cuda0": Measurement(2, 5), "cuda1-mig1": Measurement(3, 5)}),
                NodeMetric("energy", MetricType.ACCUMULATION, "mJ", Measurement(10**9),
                           {"cuda0": Measurement(10**9)}),
            ]
        },
        workloads=[
            WorkloadSample(AgentId("a"), DeviceName("cuda"),
                           WorkloadMetric("gpu_mem", "gauge", "bytes", "pid:1", Measurement(7)))
        ],
    )  # fmt: skip
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(lambda: snapshot, lambda: {"cuda": [gpu, mig]}))
    text = generate_latest(registry).decode()
    assert 'UUID="GPU-aaa"' in text
    assert 'GPU_I_PROFILE="1g.10gb"' in text
    assert 'device="cuda1",gpu="1"' in text  # the MIG parent's own power series
    assert "accelkit_cuda_device_energy_joules_total" in text
    assert promtool_findings(text) == []


def test_promtool_finds_dcgm_s_model_name_spelling():
    # why the product name is model_name: the check flags DCGM's own spelling
    text = '# HELP a_watts a\n# TYPE a_watts gauge\na_watts{UUID="x",modelName="y"} 1\n'
    assert promtool_findings(text) == [f"a_watts {CAMEL_CASE}"]


def test_promtool_does_flag_what_it_should():
    # the check is live: a counter without _total and a non-base unit are findings
    bad = "# HELP x_milliseconds a\n# TYPE x_milliseconds counter\nx_milliseconds 1\n"
    assert promtool_findings(bad) == [
        'x_milliseconds counter metrics should have "_total" suffix',
        'x_milliseconds use base unit "seconds" instead of "milliseconds"',
    ]
