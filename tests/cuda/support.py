"""Small helpers shared by the cuda plugin tests."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Coroutine, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import pytest

from accelkit import hookimpl
from accelkit.errors import PluginUnavailable
from accelkit_cuda import CUDAPlugin

from . import fake_nvml as fk

T = TypeVar("T")

#: set by ``nox -s gpu``: a machine without a usable GPU fails the real-NVML checks
REQUIRE_GPU = "ACCELKIT_REQUIRE_GPU"


def no_gpu(reason: str) -> NoReturn:
    """Skip a check that needs a real GPU, saying why; fail instead under ``REQUIRE_GPU=1``."""
    if os.environ.get(REQUIRE_GPU) == "1":
        pytest.fail(f"no usable NVIDIA GPU: {reason} ({REQUIRE_GPU}=1: these checks must run)")
    pytest.skip(f"no usable NVIDIA GPU: {reason}")


#: the start of a CUDA program through the driver's own library (``libcuda.so.1`` with ctypes):
#: ``check`` exits naming a call that failed, and the driver is initialised
DRIVER_API = r"""
import ctypes, sys
cuda = ctypes.CDLL("libcuda.so.1")
def check(result, call):
    if result:
        sys.exit(f"{call} failed: CUresult {result}")
check(cuda.cuInit(0), "cuInit")
"""


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run one coroutine to completion (the plugin's methods are async)."""
    return asyncio.run(coroutine)


def write_numa_node(sysfs: Path, bus_id: str, node: str) -> None:
    """Write ``<sysfs>/bus/pci/devices/<bus_id>/numa_node``."""
    path = sysfs / "bus" / "pci" / "devices" / bus_id
    path.mkdir(parents=True, exist_ok=True)
    (path / "numa_node").write_text(f"{node}\n")


@contextlib.contextmanager
def real_gpus(config: Mapping[str, Any]) -> Iterator[CUDAPlugin]:
    """The plugin over this machine's driver, discovered and cleaned up after; where no GPU
    answers, the check is skipped (failed under ``REQUIRE_GPU=1``)."""
    plugin = CUDAPlugin(config)
    try:
        run(plugin.init())
    except PluginUnavailable as exc:
        no_gpu(str(exc))
    try:
        run(plugin.discover())
        yield plugin
    finally:
        run(plugin.cleanup())


class FakeCUDADistribution:
    """What the accelkit-cuda entry point registers, over a fake NVML."""

    def __init__(self, nvml: fk.FakeNVML, sysfs: Path) -> None:
        self.nvml = nvml
        self.sysfs = sysfs

    @hookimpl
    def accelkit_compute_plugins(self, config: Mapping[str, Any]) -> Sequence[CUDAPlugin]:
        return [CUDAPlugin(config, nvml=self.nvml, sysfs_root=self.sysfs)]
