"""Which cores the kernel has online: ``/sys/devices/system/cpu/online`` and ``cpuN/online``.

A core taken offline (``echo 0 > /sys/devices/system/cpu/cpuN/online``) runs nothing, so the
cpu plugin reports it UNHEALTHY ("offline") until it is back online.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from accelkit.health import DeviceHealth, HealthState
from accelkit.types import DeviceId
from accelkit_cpu.cpulist import parse_cpu_list

CPU_DIR = "sys/devices/system/cpu"


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (FileNotFoundError, NotADirectoryError):
        return None


def offline_cores(root: Path, cores: Iterable[int]) -> dict[int, str]:
    """The cores of ``cores`` that are offline, each with the file that says so.

    A core is offline when its ``cpuN/online`` reads ``0`` or when the kernel's ``online`` list
    leaves it out. Files that are absent say nothing (``cpu0`` often has no ``online`` file, and
    a system without sysfs has neither); a file that cannot be parsed is reported as such.

    Raises:
        ValueError: the ``online`` list or a ``cpuN/online`` file is malformed (the message
            names the file).
    """
    base = root / CPU_DIR
    found: dict[int, str] = {}
    listed_text = _read(base / "online")
    listed: frozenset[int] | None = None
    if listed_text is not None:
        try:
            listed = frozenset(parse_cpu_list(listed_text))
        except ValueError as exc:
            msg = f"{base / 'online'}: {exc}"
            raise ValueError(msg) from None
    for core in cores:
        own = base / f"cpu{core}" / "online"
        text = _read(own)
        if text is not None and text.strip() not in {"0", "1"}:
            msg = f"{own}: expected 0 or 1, got {text.strip()!r}"
            raise ValueError(msg)
        if text is not None and text.strip() == "0":
            found[core] = str(own)
        elif listed is not None and core not in listed:
            found[core] = str(base / "online")
    return found


def core_health(root: Path, cores: Iterable[int]) -> dict[DeviceId, DeviceHealth]:
    """Each core's health: UNHEALTHY "offline" for an offline core, UNKNOWN when sysfs is bad."""
    cores = tuple(cores)
    try:
        offline = offline_cores(root, cores)
    except (OSError, ValueError) as exc:
        return {DeviceId(str(c)): DeviceHealth(HealthState.UNKNOWN, str(exc)) for c in cores}
    return {
        DeviceId(str(c)): DeviceHealth(HealthState.UNHEALTHY, "offline")
        if c in offline
        else DeviceHealth.healthy()
        for c in cores
    }
