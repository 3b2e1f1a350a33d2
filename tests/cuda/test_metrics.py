"""Node, workload and process metrics; a lost GPU never hides the others."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from decimal import Decimal

import pytest

from accelkit.metrics import Aggregate, Measurement, MetricContext, MetricType
from accelkit.partition import DevicePartition
from accelkit.types import DeviceId, NodeInfo, Workload
from accelkit_cuda.metrics import DeviceReading, node_metrics
from accelkit_cuda.nvml.readings import MemoryInfo
from accelkit_cuda.processes import leader_pid, leader_process_tree

from . import fake_nvml as fk
from .support import run

GIB = fk.GIB


def by_key(metrics):
    return {m.key: m for m in metrics}


def two_busy_gpus():
    first = fk.FakeGpu(
        0,
        memory_total=80 * GIB,
        memory_used=10 * GIB,
        utilization=(50, 20),
        power=100_000,
        power_limit=400_000,
        temperature=40,
        processes=[fk.FakeProcess(100, 4 * GIB), fk.FakeProcess(101, 2 * GIB)],
    )
    second = fk.FakeGpu(
        1,
        memory_total=80 * GIB,
        memory_used=30 * GIB,
        utilization=(75, 40),
        power=300_000,
        power_limit=400_000,
        temperature=60,
        processes=[fk.FakeProcess(100, 1 * GIB), fk.FakeProcess(200, None)],
    )
    return [first, second]


def test_node_metrics_per_device_and_for_the_node(start):
    plugin = start(two_busy_gpus())
    metrics = by_key(run(plugin.gather_node_metrics(MetricContext())))
    assert list(metrics) == ["gpu_util", "mem_util", "mem_used", "power", "temperature"]
    hundred = Decimal(100)
    gpu = metrics["gpu_util"]
    assert (gpu.type, gpu.unit) == (MetricType.UTILIZATION, "percent")
    assert gpu.per_device == {
        "cuda0": Measurement(50, hundred),
        "cuda1": Measurement(75, hundred),
    }
    assert gpu.node == Measurement(Decimal("62.5"), hundred)
    assert metrics["mem_util"].node == Measurement(30, hundred)
    used = metrics["mem_used"]
    assert (used.type, used.unit) == (MetricType.GAUGE, "bytes")
    assert used.per_device["cuda1"] == Measurement(30 * GIB, 80 * GIB)
    assert used.node == Measurement(40 * GIB, 160 * GIB)
    power = metrics["power"]
    assert power.unit == "mW"
    assert power.per_device["cuda0"] == Measurement(100_000, 400_000)
    assert power.node == Measurement(400_000, 800_000)
    temperature = metrics["temperature"]
    assert temperature.unit == "celsius"
    assert temperature.node == Measurement(60)
    assert temperature.per_device["cuda0"] == Measurement(40)


def test_values_are_decimals_never_floats(start):
    metrics = run(start(two_busy_gpus()).gather_node_metrics(MetricContext()))
    for metric in metrics:
        for reading in (metric.node, *metric.per_device.values()):
            assert isinstance(reading.value, Decimal)


def test_a_lost_gpu_is_skipped_and_logged(start, caplog):
    gpus = two_busy_gpus()
    plugin = start(gpus)
    gpus[0].errors["*"] = fk.NVML_ERROR_GPU_IS_LOST
    with caplog.at_level(logging.WARNING, logger="accelkit_cuda"):
        metrics = by_key(run(plugin.gather_node_metrics(MetricContext())))
    assert set(metrics["mem_used"].per_device) == {"cuda1"}
    assert metrics["gpu_util"].node == Measurement(75, 100)
    assert "no metrics from cuda0" in caplog.text
    assert "GPU is lost" in caplog.text


def test_an_error_in_one_reading_skips_the_whole_device(start):
    gpus = two_busy_gpus()
    plugin = start(gpus)
    gpus[1].errors["nvmlDeviceGetTemperature"] = fk.NVML_ERROR_UNKNOWN
    metrics = by_key(run(plugin.gather_node_metrics(MetricContext())))
    assert all(set(m.per_device) == {"cuda0"} for m in metrics.values())


def test_every_gpu_lost_gives_no_metrics(start):
    gpus = two_busy_gpus()
    plugin = start(gpus)
    for gpu in gpus:
        gpu.errors["*"] = fk.NVML_ERROR_GPU_IS_LOST
    assert run(plugin.gather_node_metrics(MetricContext())) == []


def test_unsupported_readings_are_left_out(start):
    gpus = [fk.FakeGpu(0, utilization=None, power=None, temperature=None, power_limit=None)]
    metrics = by_key(run(start(gpus).gather_node_metrics(MetricContext())))
    assert list(metrics) == ["mem_used"]


def test_power_without_limit_has_no_node_capacity(start):
    gpus = [fk.FakeGpu(0, power=10, power_limit=None), fk.FakeGpu(1, power=20)]
    power = by_key(run(start(gpus).gather_node_metrics(MetricContext())))["power"]
    assert power.per_device["cuda0"] == Measurement(10)
    assert power.node == Measurement(30)


def test_mig_instances_report_memory_and_their_gpu_counts_in_node_power_and_temperature(start):
    gpu = fk.mig_gpu(0, ["1g.10gb"], power=90_000, power_limit=400_000, temperature=51)
    gpu.migs[0].memory_used = GIB  # type: ignore[union-attr]
    whole = fk.FakeGpu(1, power=60_000, power_limit=300_000, temperature=40)
    metrics = by_key(run(start([gpu, whole]).gather_node_metrics(MetricContext())))
    assert metrics["mem_used"].per_device["cuda0-mig7"] == Measurement(GIB, 9856 * fk.MIB)
    # a MIG instance has no sensor of its own: no per-device reading, but the node counts it
    assert set(metrics["power"].per_device) == {"cuda1"}
    assert metrics["power"].node == Measurement(150_000, 700_000)
    assert set(metrics["temperature"].per_device) == {"cuda1"}
    assert metrics["temperature"].node == Measurement(51)


def test_a_mig_gpu_alone_still_reports_node_power(start):
    gpu = fk.mig_gpu(0, ["1g.10gb"], power=90_000, power_limit=None)
    metrics = by_key(run(start([gpu]).gather_node_metrics(MetricContext())))
    assert metrics["power"].per_device == {}
    assert metrics["power"].node == Measurement(90_000)


def test_workload_gpu_memory_from_its_process_tree(start):
    plugin = start(two_busy_gpus(), workload_pids=lambda w: {100, 101, 999})
    ctx = plugin.create_agent_context("agent-1", DevicePartition.of("cuda0", "cuda1"))
    (metric,) = run(ctx.gather_workload_metrics(MetricContext(), Workload.process_tree("100")))
    assert (metric.key, metric.type, metric.unit) == ("gpu_mem", MetricType.GAUGE, "bytes")
    assert metric.workload_id == "100"
    assert metric.value == Measurement(7 * GIB)


def test_workload_metrics_count_only_the_agents_devices(start):
    plugin = start(two_busy_gpus(), workload_pids=lambda w: {100})
    ctx = plugin.create_agent_context("agent-1", DevicePartition.of("cuda1"))
    (metric,) = run(ctx.gather_workload_metrics(MetricContext(), Workload.process_tree("100")))
    assert metric.value == Measurement(1 * GIB)


def test_a_workload_without_processes_has_no_metrics(start):
    plugin = start(two_busy_gpus(), workload_pids=lambda w: ())
    ctx = plugin.create_agent_context("agent-1", DevicePartition.of("cuda0"))
    assert run(ctx.gather_workload_metrics(MetricContext(), Workload.container("abc"))) == ()


def test_a_lost_gpu_does_not_break_workload_metrics(start, caplog):
    gpus = two_busy_gpus()
    plugin = start(gpus, workload_pids=lambda w: {100})
    gpus[0].errors["nvmlDeviceGetComputeRunningProcesses_v3"] = fk.NVML_ERROR_GPU_IS_LOST
    ctx = plugin.create_agent_context("agent-1", DevicePartition.of("cuda0", "cuda1"))
    with caplog.at_level(logging.WARNING, logger="accelkit_cuda"):
        (metric,) = run(ctx.gather_workload_metrics(MetricContext(), Workload.process_tree("1")))
    assert metric.value == Measurement(1 * GIB)
    assert "no process list from cuda0" in caplog.text


def test_process_metrics(start):
    plugin = start(two_busy_gpus())
    ctx = plugin.create_agent_context("agent-1", DevicePartition.of("cuda0", "cuda1"))
    (metric,) = run(ctx.gather_process_metrics(MetricContext(), 100))
    assert (metric.key, metric.pid, metric.value) == ("gpu_mem", 100, Measurement(5 * GIB))
    (unknown_memory,) = run(ctx.gather_process_metrics(MetricContext(), 200))
    assert unknown_memory.value == Measurement(0)
    (idle,) = run(ctx.gather_process_metrics(MetricContext(), 12345))
    assert idle.value == Measurement(0)


def test_unsupported_process_list_counts_as_none(start):
    gpus = two_busy_gpus()
    plugin = start(gpus)
    gpus[0].errors["nvmlDeviceGetComputeRunningProcesses_v3"] = fk.NVML_ERROR_NOT_SUPPORTED
    ctx = plugin.create_agent_context("agent-1", DevicePartition.of("cuda0", "cuda1"))
    (metric,) = run(ctx.gather_process_metrics(MetricContext(), 100))
    assert metric.value == Measurement(1 * GIB)


def test_leader_process_tree_of_a_live_process():
    pids = leader_process_tree(Workload.process_tree(str(os.getpid())))
    assert os.getpid() in pids


def test_drivers_without_the_v3_process_list_fall_back_to_v2(start):
    missing = {"nvmlDeviceGetComputeRunningProcesses_v3"}
    plugin = start(fk.FakeNVML(two_busy_gpus(), missing=missing))
    ctx = plugin.create_agent_context("agent-1", DevicePartition.of("cuda0", "cuda1"))
    (metric,) = run(ctx.gather_process_metrics(MetricContext(), 100))
    assert metric.value == Measurement(5 * GIB)


def test_a_library_mismatch_never_escapes_the_metrics(start):
    # pynvml raises NVMLLibraryMismatchError, not an NVMLError, for the unversioned call
    missing = {
        "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetComputeRunningProcesses_v2",
    }
    nvml = fk.FakeNVML(two_busy_gpus(), missing=missing)
    nvml.nvmlInit()
    with pytest.raises(fk.NVMLLibraryMismatchError):
        nvml.nvmlDeviceGetComputeRunningProcesses(nvml.gpus[0])
    assert not issubclass(fk.NVMLLibraryMismatchError, fk.NVMLError)
    plugin = start(fk.FakeNVML(two_busy_gpus(), missing=missing), workload_pids=lambda w: {100})
    ctx = plugin.create_agent_context("agent-1", DevicePartition.of("cuda0", "cuda1"))
    (metric,) = run(ctx.gather_process_metrics(MetricContext(), 100))
    assert metric.value == Measurement(0)
    (workload,) = run(ctx.gather_workload_metrics(MetricContext(), Workload.process_tree("1")))
    assert workload.value == Measurement(0)


def test_accelkit_run_workloads_get_gpu_memory():
    # `accelkit run` records a process tree as pid:<n>
    pids = leader_process_tree(Workload.process_tree(f"pid:{os.getpid()}"))
    assert os.getpid() in pids
    assert leader_pid("pid:42") == 42
    assert leader_pid("42") == 42
    assert leader_pid("pid:") is None
    assert leader_pid("pid:٣") is None  # a non-ASCII digit is no pid
    assert leader_pid("container-1") is None


def test_gpu_memory_of_a_pid_workload_from_the_default_process_mapping(start):
    gpus = two_busy_gpus()
    gpus[0].processes.append(fk.FakeProcess(os.getpid(), 3 * GIB))
    plugin = start(gpus)
    ctx = plugin.create_agent_context("agent-1", DevicePartition.of("cuda0", "cuda1"))
    workload = Workload.process_tree(f"pid:{os.getpid()}")
    (metric,) = run(ctx.gather_workload_metrics(MetricContext(), workload))
    assert metric.value == Measurement(3 * GIB)


def test_leader_process_tree_of_unknown_workloads_is_empty():
    assert leader_process_tree(Workload.container("c0ffee")) == frozenset()
    assert leader_process_tree(Workload.process_tree("999999999")) == frozenset()


def test_node_info(start):
    nvml = fk.FakeNVML(fk.gpus(1), driver_version="535.104.05", cuda_version=12020)
    info = run(start(nvml).get_node_info())
    assert info == NodeInfo(
        driver_version="535.104.05",
        runtime_version="12.2",
        facts={"nvml_version": "12.550.54.15", "cuda_driver_version": "12.2"},
    )


def test_leader_process_tree_includes_descendants():
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        pids = leader_process_tree(Workload.process_tree(str(os.getpid())))
        assert child.pid in pids
    finally:
        child.communicate(b"")


def test_a_mig_gpu_reports_its_power_and_temperature_per_gpu(start):
    gpu = fk.mig_gpu(0, ["1g.10gb"], power=90_000, power_limit=400_000, temperature=51)
    whole = fk.FakeGpu(1, power=60_000, power_limit=300_000, temperature=40)
    metrics = by_key(run(start([gpu, whole]).gather_node_metrics(MetricContext())))
    assert metrics["power"].per_parent == {"cuda0": Measurement(90_000, 400_000)}
    assert metrics["temperature"].per_parent == {"cuda0": Measurement(51)}
    assert metrics["mem_used"].per_parent == {}  # the instances have memory of their own


def test_each_metric_says_how_it_adds_up_per_agent(start):
    metrics = by_key(run(start(two_busy_gpus()).gather_node_metrics(MetricContext())))
    assert {k: m.aggregate for k, m in metrics.items()} == {
        "gpu_util": Aggregate.MEAN,
        "mem_util": Aggregate.MEAN,
        "mem_used": Aggregate.SUM,
        "power": Aggregate.SUM,
        "temperature": Aggregate.MAX,
    }


def test_the_sm_clock_where_nvml_reads_it():
    memory = MemoryInfo(total=80 * GIB, used=GIB)
    readings = {
        DeviceId("cuda0"): DeviceReading(memory, sm_clock=1410),
        DeviceId("cuda1"): DeviceReading(memory, sm_clock=1980),
        DeviceId("cuda2"): DeviceReading(memory),  # a board that does not tell its clock
    }
    clock = by_key(node_metrics(readings))["sm_clock"]
    assert (clock.unit, clock.aggregate) == ("MHz", Aggregate.MEAN)
    assert clock.per_device == {"cuda0": Measurement(1410), "cuda1": Measurement(1980)}
    assert clock.node == Measurement(1695)
