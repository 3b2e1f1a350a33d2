"""How much memory this node's workloads may use: RAM, capped by this process's cgroup limit.

Readers take the filesystem ``root`` (``/`` on a real host) so tests build fake cgroup trees.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import attrs
import psutil

from accelkit import CgroupDir, CgroupFS, PluginUnavailable

#: the limit file by cgroup version
LIMIT_FILES = {1: "memory.limit_in_bytes", 2: "memory.max"}
#: v1 writes "no limit" as a huge page-aligned number (2**63 - 4096 with 4 KiB pages)
_V1_UNLIMITED = 2**62

Ram = Callable[[], int]


def cgroup_limit(cgroup: CgroupDir) -> tuple[int, Path] | None:
    """The lowest memory limit on ``cgroup`` and its ancestors, and the file that sets it.

    ``None`` when none is limited ("max", v1's huge "unlimited" value, or no file at all).
    """
    name = LIMIT_FILES[cgroup.version]
    lowest: tuple[int, Path] | None = None
    for directory in cgroup.ancestors():
        limit = directory.read_int(name)
        if limit is None or (cgroup.version == 1 and limit >= _V1_UNLIMITED):
            continue
        if lowest is None or limit < lowest[0]:
            lowest = (limit, directory.path / name)
    return lowest


@attrs.frozen
class UsableMemory:
    """The usable memory (``size``), the RAM it is measured against, and what set it."""

    size: int
    ram: int
    source: str  # "ram", or the cgroup file whose limit is lower than RAM
    cgroup: CgroupDir | None = None  # the limiting cgroup, when there is one

    @classmethod
    def read(cls, root: Path | str = "/", ram: Ram | None = None) -> UsableMemory:
        """RAM (``psutil.virtual_memory().total`` unless ``ram`` is given), capped by the
        memory limit of this process's cgroup and its ancestors."""
        total = (ram or (lambda: psutil.virtual_memory().total))()
        if total <= 0:
            msg = f"no usable memory: the node reports {total} bytes of RAM"
            raise PluginUnavailable(msg)
        cgroup = CgroupFS.read(root).process_directory("memory")
        found = cgroup_limit(cgroup) if cgroup is not None else None
        if found is None or found[0] >= total:
            return cls(total, total, "ram")
        limit, source = found
        if limit <= 0:
            msg = f"no usable memory: {source} limits this process to {limit} bytes"
            raise PluginUnavailable(msg)
        return cls(limit, total, str(source), cgroup)
