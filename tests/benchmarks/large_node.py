"""The large mock node of the plan and command benchmarks: 256 cpu cores on 4 NUMA nodes,
2 TiB of memory and 64 GPUs (16 per NUMA node), as a mock plugin device file."""

from __future__ import annotations

from pathlib import Path

#: the device file's name, which the host configs name as the mock plugin's ``config-file``
DEVICE_FILE = "large-node.toml"


def write_devices(folder: Path) -> Path:
    """Write the node's device file into ``folder``; return its path."""
    lines = ["[[kinds]]", 'key = "cpu"']
    for i in range(256):
        lines += ["[[kinds.devices]]", f'id = "{i}"', f"numa-node = {i // 64}"]
    lines += ["[[kinds]]", 'key = "mem"', "[[kinds.devices]]", 'id = "root"', 'memory = "2T"']
    lines += ["[[kinds]]", 'key = "cuda"']
    for i in range(64):
        lines += ["[[kinds.devices]]", f'id = "cuda{i}"', f"numa-node = {i // 16}"]
    path = folder / DEVICE_FILE
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
