"""``gpu-metrics = true``: mock accelerators play the cuda plugin's metrics and GPU identity."""

from __future__ import annotations

import asyncio
from pathlib import Path

from accelkit.cli.app import main
from accelkit.metrics import Aggregate, MetricContext
from accelkit.metrics_export.prometheus import labels_of_devices
from accelkit_mock import accelkit_compute_plugins

GPUS = {
    "key": "cuda",
    "devices": [
        {"id": "cuda0", "memory": "40G"},
        {"id": "cuda1-mig1", "memory": "10G", "mig-profile": "1g.10gb", "parent": "cuda1"},
        {"id": "cuda1-mig2", "memory": "10G", "mig-profile": "1g.10gb", "parent": "cuda1"},
    ],
}
CORES = {"key": "cpu", "devices": [{"id": "0"}]}


def started(**config):
    plugins = {
        p.key: p for p in accelkit_compute_plugins(config={"kinds": [CORES, GPUS], **config})
    }
    for plugin in plugins.values():
        asyncio.run(plugin.init())
        asyncio.run(plugin.discover())
    return plugins


def test_gpus_play_the_cuda_plugin_s_metrics_with_their_aggregates():
    gpus = started(**{"gpu-metrics": True})["cuda"]
    metrics = {m.key: m for m in asyncio.run(gpus.gather_node_metrics(MetricContext()))}
    assert {k: m.aggregate for k, m in metrics.items() if m.aggregate is not None} == {
        "gpu_util": Aggregate.MEAN,
        "mem_util": Aggregate.MEAN,
        "mem_used": Aggregate.SUM,
        "power": Aggregate.SUM,
        "temperature": Aggregate.MAX,
        "sm_clock": Aggregate.MEAN,
    }
    assert {"utilization", "memory_used"} <= set(metrics)  # the kind's own metrics stay
    # MIG-like instances have memory but no sensors; their GPU's power is reported per GPU
    assert set(metrics["mem_used"].per_device) == {"cuda0", "cuda1-mig1", "cuda1-mig2"}
    assert set(metrics["power"].per_device) == {"cuda0"}
    assert set(metrics["power"].per_parent) == {"cuda1"}
    assert metrics["temperature"].node.value == max(
        m.value for m in [*metrics["temperature"].per_device.values(),
                          *metrics["temperature"].per_parent.values()]
    )  # fmt: skip


def test_gpus_carry_the_identity_dcgm_labels_come_from():
    gpus = started(**{"gpu-metrics": True})["cuda"]
    labels = labels_of_devices({"cuda": asyncio.run(gpus.list_devices())})["cuda"]
    assert labels["cuda0"]["gpu"] == "0"
    assert labels["cuda1-mig2"] == {
        "gpu": "1", "UUID": "MOCK-cuda-cuda1", "pci_bus_id": "00000000:11:00.0",
        "model_name": "Mock cuda", "GPU_I_PROFILE": "1g.10gb", "GPU_I_ID": "2",
    }  # fmt: skip
    assert "GPU_I_ID" not in labels["cuda1"]  # the parent GPU's own labels


def test_without_the_option_nothing_changes():
    plugins = started()
    metrics = asyncio.run(plugins["cuda"].gather_node_metrics(MetricContext()))
    assert [m.key for m in metrics] == ["utilization", "memory_used"]
    assert "index" not in asyncio.run(plugins["cuda"].list_devices())[0].extra
    cores = started(**{"gpu-metrics": True})["cpu"]  # cores and memory never play GPUs
    assert [m.key for m in asyncio.run(cores.gather_node_metrics(MetricContext()))] == [
        "utilization"
    ]


def test_a_gpu_metrics_that_is_no_boolean_is_refused_naming_file_and_key(tmp_path: Path, capsys):
    (tmp_path / "devices.toml").write_text('[[kinds]]\nkey = "cuda"\n')
    config = tmp_path / "host.toml"
    config.write_text(
        '[plugins]\nallowed = ["mock"]\n[plugins.config.mock]\nconfig-file = "devices.toml"\n'
        f'gpu-metrics = "yes"\n[resource]\nstate-dir = "{tmp_path / "state"}"\n'
    )
    assert main(["check", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert f"error: {config}:5: key 'plugins.config.mock.gpu-metrics'" in err
    assert "expected true or false, got 'yes'" in err
    assert "Traceback" not in err
