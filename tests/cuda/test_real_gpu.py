"""Checks that only a real GPU and driver can answer (``nox -s gpu``; they skip elsewhere,
and fail there under ``ACCELKIT_REQUIRE_GPU=1``, which the nox session sets).

A CUDA program is started through the driver's own library (``libcuda.so.1`` with ctypes, so no
CUDA framework is needed): it must see exactly the GPU that ``CUDA_VISIBLE_DEVICES`` names, and
the plugin must find the memory it holds in NVML's process list, per process and per workload.
Health must read the real driver's recovery-action field (or do without it) and its event set.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from accelkit.health import HealthState
from accelkit.metrics import MetricContext
from accelkit.partition import DevicePartition
from accelkit.testing.cli_runner import ACCELKIT, cli_env, run_accelkit
from accelkit.types import Workload
from accelkit_cuda import CUDAPlugin

from .support import DRIVER_API, real_gpus, run

pytestmark = pytest.mark.gpu

#: device memory the CUDA program holds (NVML adds its context's own memory on top)
HELD = 256 * 1024**2

#: a CUDA program through the driver API: prints the device count and the first device's UUID
#: (hex), then holds argv[1] bytes until its stdin closes (or for argv[2] seconds)
CUDA_PROGRAM = (
    DRIVER_API
    + r"""
import time
count = ctypes.c_int()
check(cuda.cuDeviceGetCount(ctypes.byref(count)), "cuDeviceGetCount")
device = ctypes.c_int()
check(cuda.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
uuid = (ctypes.c_ubyte * 16)()
check(cuda.cuDeviceGetUuid(uuid, device), "cuDeviceGetUuid")
context = ctypes.c_void_p()
check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "cuDevicePrimaryCtxRetain")
check(cuda.cuCtxSetCurrent(context), "cuCtxSetCurrent")
pointer = ctypes.c_uint64()
check(cuda.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(int(sys.argv[1]))), "cuMemAlloc")
print(count.value, bytes(uuid).hex(), flush=True)
if len(sys.argv) > 2:
    time.sleep(float(sys.argv[2]))
else:
    sys.stdin.read()
"""
)


@pytest.fixture
def plugin() -> Iterator[CUDAPlugin]:
    with real_gpus({"health-interval": "30"}) as plugin:
        yield plugin


def whole_gpu(plugin: CUDAPlugin):
    whole = [d for d in plugin.devices if "mig_profile" not in d.extra]
    if not whole:
        pytest.skip("every GPU is in MIG mode (CUDA programs then need a MIG instance)")
    return whole[0]


def test_a_cuda_program_sees_its_gpu_and_its_memory_is_found(plugin):
    device = whole_gpu(plugin)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(device.uuid)}
    command = [sys.executable, "-c", CUDA_PROGRAM, str(HELD)]
    with subprocess.Popen(
        command, env=env, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as program:  # fmt: skip
        assert program.stdout is not None
        assert program.stdin is not None
        line = program.stdout.readline()
        if not line:
            pytest.fail(f"the CUDA program failed: {program.communicate(timeout=30)[1]}")
        count, uuid = line.split()
        assert count == "1", "CUDA_VISIBLE_DEVICES=<uuid> must show that GPU alone"
        assert uuid == str(device.uuid).removeprefix("GPU-").replace("-", "")
        ctx = plugin.create_agent_context("agent-1", DevicePartition.of(device.device_id))
        (process,) = run(ctx.gather_process_metrics(MetricContext(), program.pid))
        assert process.value.value >= HELD
        workload = Workload.process_tree(f"pid:{program.pid}")
        (metric,) = run(ctx.gather_workload_metrics(MetricContext(), workload))
        assert metric.value.value >= HELD
        program.stdin.close()
        assert program.wait(timeout=30) == 0


def test_gpus_read_healthy_and_a_quiet_watch_ends_when_cancelled(plugin):
    health = run(plugin.device_health())
    assert set(health) == {d.device_id for d in plugin.devices}
    for device_id, reading in health.items():
        assert reading.state is HealthState.HEALTHY, f"{device_id}: {reading.reason}"

    async def watch_then_cancel() -> None:
        task = asyncio.ensure_future(anext(plugin.watch_health()))
        await asyncio.sleep(1)  # several of the driver's own wait timeouts
        assert not task.done(), "a healthy GPU sent a health event"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(watch_then_cancel())
    assert not [t for t in threading.enumerate() if t.name == "accelkit-cuda-events"]


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def accelkit(*args: str) -> subprocess.CompletedProcess[str]:
    return run_accelkit(*args)


@pytest.fixture
def gpu_node(plugin, tmp_path) -> Path:
    """A node of the real GPUs, one agent; the process runtime contains with cgroups (root)."""
    whole_gpu(plugin)
    if os.geteuid() != 0:
        pytest.skip("the process runtime needs root to make cgroups")
    config = tmp_path / "host.toml"
    config.write_text(
        f'[resource]\nallocation-mode = "auto-split"\nstate-dir = "{tmp_path / "state"}"\n'
        '[plugins]\nallowed = ["cuda"]\n[[agents]]\n[agents.agent]\nid = "agent-1"\n'
    )
    return config


def test_a_killed_runs_cuda_program_keeps_its_gpu_until_it_is_released(plugin, gpu_node):
    """The supervisor dies; its CUDA program, in its cgroup, still holds GPU memory: the GPU
    stays booked to it (a second run is refused) until ``accelkit release`` ends it."""
    where = ["--config", str(gpu_node), "--agent", "agent-1", "--slots", "cuda.device=1"]
    env = cli_env()
    command = [sys.executable, "-c", CUDA_PROGRAM, str(HELD), "300"]
    supervisor = subprocess.Popen(
        [*ACCELKIT, "run", *where, "--", *command],
        env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert supervisor.stdout is not None
        if not supervisor.stdout.readline():
            pytest.fail(f"the CUDA program failed: {supervisor.communicate(timeout=30)[1]}")
        supervisor.kill()
        supervisor.wait(30)

        listed = accelkit("status", "--config", str(gpu_node), "--json")
        assert listed.returncode == 0, listed.stderr
        (entry,) = json.loads(listed.stdout)
        assert entry["liveness"] == "running"
        program = int(entry["workload"].removeprefix("pid:"))
        ctx = plugin.create_agent_context(
            "agent-1", DevicePartition(tuple(d.device_id for d in plugin.devices))
        )
        (held,) = run(ctx.gather_process_metrics(MetricContext(), program))
        assert held.value.value >= HELD, "the orphaned program still holds its GPU memory"

        second = accelkit("run", *where, "--", "true")
        assert second.returncode == 125
        assert f"held by {entry['workload']!r}" in second.stderr

        released = accelkit("release", "--config", str(gpu_node), "--grace", "2", entry["workload"])
        assert released.returncode == 0, released.stderr
        assert gone(program)
        again = accelkit("run", *where, "--", "true")
        assert again.returncode == 0, again.stderr
    finally:
        supervisor.kill()
        supervisor.communicate(timeout=30)
        with contextlib.suppress(Exception):  # leave no program holding the GPU
            for entry in json.loads(accelkit("status", "--config", str(gpu_node), "--json").stdout):
                accelkit("release", "--config", str(gpu_node), "--grace", "0", entry["workload"])
