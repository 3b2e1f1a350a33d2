"""Small helpers shared by the cuda plugin tests."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import pytest

T = TypeVar("T")

#: set by ``nox -s gpu``: a machine without a usable GPU fails the real-NVML checks
REQUIRE_GPU = "ACCELKIT_REQUIRE_GPU"


def no_gpu(reason: str) -> NoReturn:
    """Skip a check that needs a real GPU, saying why; fail instead under ``REQUIRE_GPU=1``."""
    if os.environ.get(REQUIRE_GPU) == "1":
        pytest.fail(f"no usable NVIDIA GPU: {reason} ({REQUIRE_GPU}=1: these checks must run)")
    pytest.skip(f"no usable NVIDIA GPU: {reason}")


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run one coroutine to completion (the plugin's methods are async)."""
    return asyncio.run(coroutine)


def write_numa_node(sysfs: Path, bus_id: str, node: str) -> None:
    """Write ``<sysfs>/bus/pci/devices/<bus_id>/numa_node``."""
    path = sysfs / "bus" / "pci" / "devices" / bus_id
    path.mkdir(parents=True, exist_ok=True)
    (path / "numa_node").write_text(f"{node}\n")
