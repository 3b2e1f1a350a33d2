"""The cores this process may use and where they sit: cgroup cpuset, sysfs NUMA, cpuinfo.

Every reader takes the filesystem ``root`` (``/`` on a real host) so tests build fake trees.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import attrs

from accelkit import CgroupDir, CgroupFS, PluginLoadError, PluginUnavailable
from accelkit_cpu.cpulist import parse_cpu_list

_NODE_DIR = re.compile(r"node(\d+)")
#: the cpuset files holding the usable cores, by cgroup version, most specific first
_CPUSET_FILES = {1: ("cpuset.effective_cpus", "cpuset.cpus"), 2: ("cpuset.cpus.effective",)}

Affinity = Callable[[], Iterable[int]]


def _read_cpu_list_file(path: Path, text: str) -> tuple[int, ...]:
    try:
        return parse_cpu_list(text)
    except ValueError as exc:
        msg = f"{path}: {exc}"
        raise PluginLoadError(msg) from None


def cpuset_cores(cgroup: CgroupDir) -> tuple[tuple[int, ...], Path] | None:
    """The effective cpuset of ``cgroup`` (or its nearest ancestor that has one) and its file."""
    for directory in cgroup.ancestors():
        for name in _CPUSET_FILES[cgroup.version]:
            text = directory.read(name)
            if text is None:
                continue
            cores = _read_cpu_list_file(directory.path / name, text)
            if cores:  # an empty v2 cpuset means "inherited from the parent"
                return cores, directory.path / name
    return None


def usable_cores(root: Path, affinity: Affinity) -> tuple[tuple[int, ...], str]:
    """The cores of this process's cgroup cpuset, else of its affinity mask, and the source."""
    cgroup = CgroupFS.read(root).process_directory("cpuset")
    found = cpuset_cores(cgroup) if cgroup is not None else None
    if found is not None:
        return found[0], str(found[1])
    cores = tuple(sorted(affinity()))
    if not cores:
        msg = "no usable CPU core: the affinity mask is empty"
        raise PluginUnavailable(msg)
    return cores, "sched_getaffinity"


def numa_nodes(root: Path) -> dict[int, int]:
    """The NUMA node of each core, from ``/sys/devices/system/node/node*/cpulist``.

    Empty when the kernel shows no NUMA nodes (then every core's node is unknown).
    """
    nodes: dict[int, int] = {}
    base = root / "sys/devices/system/node"
    if not base.is_dir():
        return nodes
    for entry in sorted(base.iterdir()):
        match = _NODE_DIR.fullmatch(entry.name)
        if match is None:
            continue
        cpulist = entry / "cpulist"
        try:
            text = cpulist.read_text()
        except FileNotFoundError:
            continue
        for core in _read_cpu_list_file(cpulist, text):
            nodes[core] = int(match[1])
    return nodes


def model_names(root: Path) -> dict[int, str]:
    """The model name of each core from ``/proc/cpuinfo``; blocks without one are skipped."""
    try:
        text = (root / "proc/cpuinfo").read_text(errors="replace")
    except FileNotFoundError:
        return {}
    names: dict[int, str] = {}
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields.setdefault(key.strip().lower(), value.strip())
        processor, model = fields.get("processor", ""), fields.get("model name", "")
        if processor.isdigit() and model:
            names[int(processor)] = model
    return names


@attrs.frozen
class CPUTopology:
    """The usable cores, the NUMA node and model name of each, and where the cores came from."""

    cores: tuple[int, ...]
    numa_node: Mapping[int, int]
    model_name: Mapping[int, str]
    source: str

    @classmethod
    def read(cls, root: Path | str = "/", affinity: Affinity | None = None) -> CPUTopology:
        """Read everything under ``root``; ``affinity`` defaults to ``os.sched_getaffinity(0)``."""
        root = Path(root)
        cores, source = usable_cores(root, affinity or (lambda: os.sched_getaffinity(0)))
        return cls(cores, numa_nodes(root), model_names(root), source)
