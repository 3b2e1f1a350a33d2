"""``promtool check metrics`` (Prometheus' own linter) on accelkit's exposition.

It finds nothing, with one deliberate exception: the labels DCGM exporter uses (``UUID``,
``modelName``, ``GPU_I_PROFILE``, ``GPU_I_ID``) are not snake_case, and the linter says so for
every family that carries them. They keep DCGM's spelling so that queries join the two
exporters' series without ``label_replace``. Skipped, saying why, where promtool is not
installed (Debian: ``apt-get install prometheus``).
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
    snapshot = MetricsSnapshot(
        node={
            "cuda": [
                NodeMetric("gpu_util", MetricType.UTILIZATION, "percent", Measurement(5, 100),
                           {"cuda0": Measurement(5, 100)}),
                NodeMetric("power", MetricType.GAUGE, "mW", Measurement(70000, 700000),
                           {"cuda0": Measurement(70000, 700000)}),
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
    registry.register(SnapshotCollector(lambda: snapshot, lambda: {"cuda": [gpu]}))
    text = generate_latest(registry).decode()
    assert 'UUID="GPU-aaa"' in text
    assert "accelkit_cuda_device_energy_joules_total" in text
    findings = promtool_findings(text)
    # only the DCGM label spelling, once per device family, and nothing about the node families
    assert sorted(findings) == [
        f"accelkit_cuda_device_{family} {CAMEL_CASE}"
        for family in (
            "energy_joules_total",
            "gpu_util_ratio",
            "power_capacity_watts",
            "power_watts",
        )
    ]


def test_promtool_does_flag_what_it_should():
    # the check is live: a counter without _total and a non-base unit are findings
    bad = "# HELP x_milliseconds a\n# TYPE x_milliseconds counter\nx_milliseconds 1\n"
    assert promtool_findings(bad) == [
        'x_milliseconds counter metrics should have "_total" suffix',
        'x_milliseconds use base unit "seconds" instead of "milliseconds"',
    ]
