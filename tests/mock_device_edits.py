"""Edits of a mock device file as an operator makes them: the whole file, replaced atomically
(as an editor saves it), so that a reader never sees half of it."""

from __future__ import annotations

from pathlib import Path


def _replace(devices: Path, lines: list[str]) -> None:
    tmp = devices.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(devices)


def write_gpus(devices: Path, ids: list[str]) -> None:
    """The mock device file with one core and these GPUs, all on NUMA node 0."""
    lines = ["[[kinds]]", 'key = "cpu"', "[[kinds.devices]]", 'id = "0"', "numa-node = 0"]
    lines += ["[[kinds]]", 'key = "cuda"']
    for gpu in ids:
        lines += ["[[kinds.devices]]", f'id = "{gpu}"', "numa-node = 0"]
    _replace(devices, lines)


def set_health(devices: Path, device: str, state: str, reason: str = "") -> None:
    """The mock device file with ``device``'s health set to ``state`` for ``reason``."""
    lines: list[str] = []
    current = None
    for line in devices.read_text().splitlines():
        if line.startswith("id = "):
            current = line
        if line.startswith(("health = ", "health-reason = ")) and current == f'id = "{device}"':
            continue
        lines.append(line)
        if line == f'id = "{device}"':
            lines += [f'health = "{state}"', f'health-reason = "{reason}"']
    _replace(devices, lines)
