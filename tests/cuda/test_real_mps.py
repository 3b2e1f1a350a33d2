"""Shares enforced through CUDA MPS on a real GPU (``nox -s gpu``; skipped elsewhere, failed
there under ``ACCELKIT_REQUIRE_GPU=1`` only where no GPU answers: a GPU without the MPS
executable skips with the reason).

Two workloads are each given 0.5 of one GPU: each CUDA program (the driver API through ctypes)
allocates 256 MiB blocks until the driver refuses one, and must get about half the GPU's memory
and no more, while the other keeps running; and a compute-bound kernel timed under a 0.5 share
takes about twice as long as on the whole GPU, alone or beside the other share's (the SMs are
split, not time-sliced). The MPS daemon accelkit started is stopped when the last of them is torn
down. The GPU's settings are left as they are.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from decimal import Decimal

import pytest

from accelkit.partition import DevicePartition
from accelkit.types import Workload
from accelkit_cuda import CUDAPlugin
from accelkit_cuda.mps import MPS, find_control

from .spin_kernel import time_together
from .support import DRIVER_API, real_gpus, run

pytestmark = pytest.mark.gpu

BLOCK = 256 * 1024**2
#: allocates BLOCK bytes at a time until refused; prints the bytes it got and the CUresult
#: that ended it, then holds them until its stdin closes
GREEDY_PROGRAM = (
    DRIVER_API
    + r"""
device = ctypes.c_int()
check(cuda.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
context = ctypes.c_void_p()
check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "cuDevicePrimaryCtxRetain")
check(cuda.cuCtxSetCurrent(context), "cuCtxSetCurrent")
got, result = 0, 0
while True:
    pointer = ctypes.c_uint64()
    result = cuda.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(int(sys.argv[1])))
    if result:
        break
    got += int(sys.argv[1])
print(got, result, flush=True)
sys.stdin.read()
"""
)
CUDA_ERROR_OUT_OF_MEMORY = 2


@pytest.fixture
def shares() -> Iterator[CUDAPlugin]:
    if find_control("nvidia-cuda-mps-control") is None:
        pytest.skip("no nvidia-cuda-mps-control on PATH: shares cannot be enforced here")
    # pytest's tmp_path is too long for the daemon's sockets under <dir>/<GPU UUID>/pipe
    short = tempfile.mkdtemp(prefix="mps-", dir="/tmp")
    config = {"allocation": "fractional", "shares": "enforced", "mps-directory": short}
    try:
        with real_gpus(config) as plugin:
            yield plugin
    finally:
        shutil.rmtree(short, ignore_errors=True)


def test_two_half_shares_each_get_half_the_memory_under_mps(shares):
    whole = [d for d in shares.devices if "parent_id" not in d.extra]
    if not whole:
        pytest.skip("every GPU is in MIG mode")
    device = whole[0]
    ctx = shares.create_agent_context("agent-1", DevicePartition.of(device.device_id))
    alloc = {"cuda.shares": {device.device_id: Decimal("0.5")}}
    hooks = [
        ctx.create_lifecycle_hook(Workload.process_tree(f"pid:mps-{n}"), alloc) for n in (1, 2)
    ]
    programs: list[subprocess.Popen[str]] = []
    try:
        for hook in hooks:
            config = run(hook.pre_create())
            assert config.env_vars["ACCELKIT_CUDA_SHARE_ENFORCEMENT"] == "enforced:mps"
            programs.append(
                subprocess.Popen(
                    [sys.executable, "-c", GREEDY_PROGRAM, str(BLOCK)],
                    env={**os.environ, **config.env_vars},
                    text=True,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
            )
        half = device.memory_size // 2
        for program in programs:
            assert program.stdout is not None
            line = program.stdout.readline()
            if not line:
                pytest.fail(f"the CUDA program failed: {program.communicate(timeout=60)[1]}")
            got, result = (int(word) for word in line.split())
            print(f"a 0.5 share allocated {got} of {device.memory_size} bytes")  # the figure
            assert result == CUDA_ERROR_OUT_OF_MEMORY, "refused cleanly: out of memory"
            assert half * 4 // 5 <= got <= half, "about half the GPU's memory, and no more"
        assert all(p.poll() is None for p in programs), "both keep running at their limits"
    finally:
        for program in programs:
            if program.stdin is not None:
                program.stdin.close()
            program.wait(timeout=60)
        for hook in hooks:
            run(hook.post_terminate())
    assert device.uuid is not None
    assert shares.mps is not None
    assert not MPS(shares.mps.control, shares.mps.root).running(device.uuid), "daemon stopped"


def test_two_half_shares_split_the_sms(shares):
    """Each 0.5 share runs on about half the SMs: its kernel takes about twice the whole GPU's
    time, and no longer beside the other share's (``tests/benchmarks/gpu_share_split.py`` gives
    the figures)."""
    whole = [d for d in shares.devices if "parent_id" not in d.extra]
    if not whole:
        pytest.skip("every GPU is in MIG mode")
    device = whole[0]
    plain = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_MPS_")}
    blocks, iters, launches = 32 * max(1, device.processing_units), 100_000, 5
    (full,) = time_together(
        sys.executable, [{**plain, "CUDA_VISIBLE_DEVICES": str(device.uuid)}], blocks, iters, 3
    )
    ctx = shares.create_agent_context("agent-1", DevicePartition.of(device.device_id))
    alloc = {"cuda.shares": {device.device_id: Decimal("0.5")}}
    hooks = [
        ctx.create_lifecycle_hook(Workload.process_tree(f"pid:split-{n}"), alloc) for n in (1, 2)
    ]
    try:
        envs = [{**plain, **run(hook.pre_create()).env_vars} for hook in hooks]
        (alone,) = time_together(sys.executable, envs[:1], blocks, iters, launches)
        beside = time_together(sys.executable, envs, blocks, iters, launches)
    finally:
        for hook in hooks:
            run(hook.post_terminate())
    print(f"kernel ms: whole GPU {full:.2f}, 0.5 share alone {alone:.2f}, beside {beside}")
    assert alone >= 1.4 * full, "a 0.5 share runs on about half the SMs"
    assert max(beside) <= 1.4 * alone, "the other share's kernels do not take its SMs"
