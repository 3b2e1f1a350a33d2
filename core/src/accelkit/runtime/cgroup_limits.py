"""What a workload's cgroups enforce: memory, cpuset, pids and the device nodes it may not open.

:class:`CgroupLimits` is the runtime-neutral value the process runtime turns into cgroup files;
:func:`deny_rules` turns device node paths into cgroup v1 ``devices.deny`` rules
(``c MAJ:MIN rwm``) from ``os.stat``.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable

import attrs

from accelkit.errors import WorkloadError
from accelkit.reprs import attrs_eq, attrs_hash, attrs_repr
from accelkit.runtime.render.cpulist import format_cpu_list

__all__ = ["CgroupLimits", "DeviceRule", "cpu_list", "deny_rules"]


def _sorted_rules(rules: Iterable[DeviceRule]) -> tuple[DeviceRule, ...]:
    return tuple(sorted(set(rules)))


@attrs.frozen(order=True, repr=False)
class DeviceRule:
    """One device node as the devices controller names it: type (``c``/``b``), major, minor."""

    __repr__ = attrs_repr

    kind: str
    major: int
    minor: int
    path: str = attrs.field(eq=False, order=False, default="")

    def deny_line(self) -> str:
        """The line written to ``devices.deny``: every access to this node."""
        return f"{self.kind} {self.major}:{self.minor} rwm"


@attrs.frozen(repr=False)
class CgroupLimits:
    """The limits of one workload's cgroups; ``None`` means "not limited"."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    memory: int | None = None
    cpus: tuple[int, ...] | None = None
    mems: tuple[int, ...] | None = None
    pids_max: int | None = None
    denied_devices: tuple[DeviceRule, ...] = attrs.field(default=(), converter=_sorted_rules)


def cpu_list(ids: Iterable[int]) -> str:
    """``[0, 1, 2, 5]`` → ``"0-2,5"``: the list format of ``cpuset.cpus`` and ``cpuset.mems``."""
    return format_cpu_list(ids)


def deny_rules(node_device_nodes: Iterable[str], allowed: Iterable[str]) -> tuple[DeviceRule, ...]:
    """Rules denying each of ``node_device_nodes`` that is not an ``allowed`` node.

    Nodes are compared by device number, so an allowed path that names the same device as a
    denied one (a symlink, a second node) keeps it allowed. A missing node is skipped: nothing
    can open it. A path that is not a device node is a :class:`WorkloadError`.
    """
    granted = {(r.kind, r.major, r.minor) for r in _rules(allowed, strict=False)}
    return tuple(
        rule
        for rule in _rules(node_device_nodes, strict=True)
        if (rule.kind, rule.major, rule.minor) not in granted
    )


def _rules(paths: Iterable[str], *, strict: bool) -> list[DeviceRule]:
    rules = []
    for path in paths:
        try:
            info = os.stat(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            msg = f"cannot read device node {path}: {exc.strerror or exc}"
            raise WorkloadError(msg) from None
        if stat.S_ISCHR(info.st_mode):
            kind = "c"
        elif stat.S_ISBLK(info.st_mode):
            kind = "b"
        elif strict:
            msg = f"{path} is not a device node"
            raise WorkloadError(msg)
        else:
            continue
        rules.append(DeviceRule(kind, os.major(info.st_rdev), os.minor(info.st_rdev), path))
    return rules
