"""Fixtures for the cuda plugin tests: a fake NVML, a fake /sys tree and a started plugin."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from accelkit_cuda import CUDAPlugin

from .fake_nvml import FakeGpu, FakeNVML
from .support import run


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    """An empty fake ``/sys``; tests write ``bus/pci/devices/<id>/numa_node`` into it."""
    root = tmp_path / "sys"
    (root / "bus" / "pci" / "devices").mkdir(parents=True)
    return root


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    """An empty fake ``/proc``; tests write ``driver/nvidia-caps/mig-minors`` into it."""
    root = tmp_path / "proc"
    root.mkdir()
    return root


@pytest.fixture
def start(sysfs: Path, proc: Path) -> Iterator[Callable[..., CUDAPlugin]]:
    """Build a plugin over a fake NVML, run ``init`` and ``discover``; cleaned up after."""
    started: list[CUDAPlugin] = []

    def _start(
        gpus: list[FakeGpu] | FakeNVML, config: dict[str, Any] | None = None, **kwargs: Any
    ) -> CUDAPlugin:
        # a list of fake GPUs, a FakeNVML, or a module such as the real pynvml
        nvml = FakeNVML(gpus) if isinstance(gpus, list) else gpus
        kwargs.setdefault("proc_root", proc)
        config = dict(config or {})
        if "mps-control" not in config:
            config.setdefault("mps", False)  # never a real MPS daemon for a fake GPU
        plugin = CUDAPlugin(config, nvml=nvml, sysfs_root=sysfs, **kwargs)
        run(plugin.init())
        started.append(plugin)
        run(plugin.discover())
        return plugin

    yield _start
    for plugin in started:
        run(plugin.cleanup())
