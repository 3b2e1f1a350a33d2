"""Small helpers shared by the cuda plugin tests."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run one coroutine to completion (the plugin's methods are async)."""
    return asyncio.run(coroutine)


def write_numa_node(sysfs: Path, bus_id: str, node: str) -> None:
    """Write ``<sysfs>/bus/pci/devices/<bus_id>/numa_node``."""
    path = sysfs / "bus" / "pci" / "devices" / bus_id
    path.mkdir(parents=True, exist_ok=True)
    (path / "numa_node").write_text(f"{node}\n")
