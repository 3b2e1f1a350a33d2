"""The same checks against the fake NVML, the real pynvml over a simulated NVML library, and,
on a machine with a GPU, the real one.

``pytest -m gpu tests/cuda`` (``nox -s gpu``) runs only the real-NVML cases; without a driver
or GPU they skip with the reason. The default run covers the fake cases and the simulated
library (``simulated/libnvidia_ml_sim.c``, built with the C compiler for each run: a driver with
the ``_v3`` process list and one without it, where pynvml raises ``NVMLLibraryMismatchError``);
those skip where no C compiler is installed.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from accelkit.errors import PluginUnavailable
from accelkit.metrics import MetricContext
from accelkit.partition import DevicePartition
from accelkit.types import SlotType, Workload
from accelkit_cuda import CUDAPlugin

from . import fake_nvml as fk
from .support import no_gpu, run

BACKENDS = [
    pytest.param("fake", id="fake"),
    pytest.param("sim-v3", id="pynvml-over-simulated-driver"),
    pytest.param("sim-v2", id="pynvml-over-simulated-old-driver"),
    pytest.param("real", id="real", marks=pytest.mark.gpu),
]
SIMULATED = Path(__file__).parent / "simulated" / "libnvidia_ml_sim.c"
#: GPU memory the simulated library reports for the test process on GPU 0
SIM_PID_BYTES = 3 * 1024**2
#: mps_workloads only where the node has CUDA MPS (the real backend may)
KNOWN_METRICS = {
    "gpu_util", "mem_util", "mem_used", "power", "temperature", "sm_clock", "mps_workloads"
}  # fmt: skip
UUID = re.compile(r"(GPU|MIG)-[0-9A-Za-z-/]+")


def fake_node() -> list[fk.FakeGpu]:
    return [fk.FakeGpu(0, numa_node=0), fk.mig_gpu(1, ["3g.40gb", "1g.10gb"]), fk.FakeGpu(2)]


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return str(request.param)


@pytest.fixture(scope="session")
def simulated_libraries(tmp_path_factory) -> dict[str, Path]:
    """The simulated NVML library, built with and without the ``_v3`` process list.

    Empty where no C compiler is installed (the simulated cases then skip).
    """
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return {}
    built = {}
    for name, flags in (("sim-v3", ["-DWITH_V3_PROCESSES"]), ("sim-v2", [])):
        path = tmp_path_factory.mktemp("nvml") / f"libnvidia-ml-{name}.so"
        command = [compiler, "-shared", "-fPIC", "-Wall", "-Werror", "-o", str(path), *flags]
        subprocess.run([*command, str(SIMULATED)], check=True, capture_output=True)
        built[name] = path
    return built


def real_pynvml_over(library: Path, monkeypatch: pytest.MonkeyPatch):
    """The real pynvml, pointed at a simulated library until ``monkeypatch`` is undone."""
    import pynvml

    monkeypatch.setenv("NVML_SIM_PID", str(os.getpid()))
    monkeypatch.setenv("NVML_SIM_PID_BYTES", str(SIM_PID_BYTES))
    monkeypatch.setattr(pynvml, "nvmlLib", ctypes.CDLL(str(library)))
    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
    return pynvml


@pytest.fixture
def make(backend, start, monkeypatch, simulated_libraries, sysfs, proc) -> Iterator:
    """Build a started plugin with a config over the chosen NVML."""
    real: list[CUDAPlugin] = []

    def _make(config=None) -> CUDAPlugin:
        if backend == "fake":
            return start(fake_node(), config)
        if backend.startswith("sim"):
            if backend not in simulated_libraries:
                pytest.skip("no C compiler to build the simulated NVML library")
            nvml = real_pynvml_over(simulated_libraries[backend], monkeypatch)
            plugin = CUDAPlugin(config or {}, nvml=nvml, sysfs_root=sysfs, proc_root=proc)
        else:
            plugin = CUDAPlugin(config or {})
        try:
            run(plugin.init())
        except PluginUnavailable as exc:
            no_gpu(str(exc))
        real.append(plugin)
        run(plugin.discover())
        return plugin

    yield _make
    for plugin in real:
        run(plugin.cleanup())


def test_devices_are_well_formed(make):
    plugin = make()
    devices = plugin.devices
    assert devices
    ids = [d.device_id for d in devices]
    assert len(set(ids)) == len(ids)
    for device in devices:
        assert device.device_name == "cuda"
        assert device.uuid is not None
        assert UUID.fullmatch(device.uuid)
        assert device.memory_size > 0
        assert device.extra["minor"].isdecimal()
        assert device.numa_node is None or device.numa_node >= 0


def test_uuid_ids_are_the_uuids(make):
    plugin = make({"device-id": "uuid"})
    assert [d.device_id for d in plugin.devices] == [d.uuid for d in plugin.devices]


def test_slots_are_prefixed_and_declared(make):
    plugin = make()
    slots = plugin.device_slots(plugin.devices)
    assert set(slots) == {d.device_id for d in plugin.devices}
    declared = {s.name for s in plugin.configurable_slots()}
    for info in slots.values():
        assert info.slot_name.startswith("cuda.")
        assert info.slot_name in declared
        if info.slot_name.startswith("cuda.mig-"):
            assert info.slot_type is SlotType.UNIQUE
            assert info.amount == 1


def test_hook_exposes_one_allocated_device(make):
    plugin = make()
    device = plugin.devices[-1]
    slot = plugin.device_slots([device])[device.device_id].slot_name
    alloc = {slot: {device.device_id: Decimal(1)}}
    ctx = plugin.create_agent_context("agent-1", DevicePartition.of(device.device_id))
    tree = run(ctx.create_lifecycle_hook(Workload.process_tree("1"), alloc).pre_create())
    assert tree.env_vars == {"CUDA_VISIBLE_DEVICES": device.uuid}
    box = run(ctx.create_lifecycle_hook(Workload.container("c"), alloc).pre_create())
    assert box.env_vars["NVIDIA_VISIBLE_DEVICES"] == device.uuid
    assert box.cdi_devices == (f"nvidia.com/gpu={device.uuid}",)
    assert box.mounts[0].source == f"/dev/nvidia{device.extra['minor']}"
    assert box.resource_data["CUDA_GLOBAL_DEVICE_IDS"] == f"0:{device.device_id}"


def test_node_metrics_are_well_formed(make):
    plugin = make()
    metrics = {m.key: m for m in run(plugin.gather_node_metrics(MetricContext()))}
    assert set(metrics) <= KNOWN_METRICS
    assert set(metrics["mem_used"].per_device) == {d.device_id for d in plugin.devices}
    for key in {"gpu_util", "mem_util"} & set(metrics):
        for reading in metrics[key].per_device.values():
            assert Decimal(0) <= reading.value <= Decimal(100)
    for reading in metrics["mem_used"].per_device.values():
        assert reading.capacity is not None
        assert Decimal(0) <= reading.value <= reading.capacity


def test_process_and_workload_metrics(make):
    plugin = make()
    ctx = plugin.create_agent_context(
        "agent-1", DevicePartition(tuple(d.device_id for d in plugin.devices))
    )
    (process,) = run(ctx.gather_process_metrics(MetricContext(), os.getpid()))
    assert process.value.value >= 0
    workload = Workload.process_tree(str(os.getpid()))
    (metric,) = run(ctx.gather_workload_metrics(MetricContext(), workload))
    assert metric.value.value >= 0


def test_whole_gpus_have_their_sm_count(make, backend):
    plugin = make()
    whole = [d for d in plugin.devices if "mig_profile" not in d.extra]
    assert whole
    for device in whole:
        assert device.processing_units > 0, "an SM count of 0 would be false"
    if backend.startswith("sim"):
        assert {d.processing_units for d in whole} == {132}  # 16896 cores, sm_90


def test_process_memory_on_drivers_with_and_without_the_v3_list(make, backend):
    if not backend.startswith("sim"):
        pytest.skip("the simulated library sets the test process's GPU memory")
    plugin = make()
    ctx = plugin.create_agent_context("agent-1", DevicePartition.of("cuda0", "cuda1"))
    (process,) = run(ctx.gather_process_metrics(MetricContext(), os.getpid()))
    assert process.value.value == SIM_PID_BYTES
    workload = Workload.process_tree(f"pid:{os.getpid()}")
    (metric,) = run(ctx.gather_workload_metrics(MetricContext(), workload))
    assert metric.value.value == SIM_PID_BYTES


def test_node_info(make):
    info = run(make().get_node_info())
    assert info.driver_version
    assert re.fullmatch(r"\d+\.\d+", info.runtime_version)
    assert info.facts["nvml_version"]


def test_identity_fields(make, backend):
    plugin = make()
    for device in plugin.devices:
        assert device.extra["pci_bus_id"]
        assert device.extra["driver_version"]
        for key in ("serial", "board_part_number", "vbios_version"):
            assert device.extra.get(key, "x").strip()  # absent, or a real value
    if backend.startswith("sim"):
        first, second = plugin.devices
        assert first.extra["serial"] == "1654922001234"
        assert "serial" not in second.extra  # NOT_SUPPORTED: left out
        assert first.extra["board_part_number"] == "692-2G520-0200-000"
        assert first.extra["vbios_version"] == "96.00.74.00.11"


def test_topology(make, backend):
    from accelkit_cuda.topology import NVLINK, SYSTEM

    plugin = make()
    whole = [d.device_id for d in plugin.devices if "parent_id" not in d.extra]
    if backend == "sim-v3":  # two GPUs on two NUMA nodes, joined by NVLink
        assert plugin.topology is not None
        assert plugin.topology.level("cuda0", "cuda1") == NVLINK
        assert plugin.topology.pcie[frozenset(("cuda0", "cuda1"))] == SYSTEM
    elif backend == "sim-v2":  # no NVLink entry points at all
        assert plugin.topology is not None
        assert plugin.topology.level("cuda0", "cuda1") == SYSTEM
    elif plugin.topology is not None:
        assert set(plugin.topology.devices) == set(whole)
