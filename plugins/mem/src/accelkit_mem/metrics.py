"""Memory in use on the node, by workloads and by processes, in bytes.

The node figure is ``psutil.virtual_memory()`` used / total. A workload with a cgroup reports its
working set, the charge less the page cache the kernel can drop at once (v2 ``memory.current``
minus ``inactive_file``, v1 ``memory.usage_in_bytes`` minus ``total_inactive_file``); a process
tree reports the sum of its processes' resident sets (``/proc/<pid>/statm``); a process its RSS.
"""

from __future__ import annotations

import os
from pathlib import Path

import psutil

from accelkit import (
    CgroupDir,
    CgroupFS,
    Measurement,
    MetricContext,
    MetricType,
    NodeMetric,
    ProcessMetric,
    WorkloadLocation,
    WorkloadMetric,
    process_tree,
    round_process_tree,
)

KEY = "mem"
_BYTES = "bytes"
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
#: (usage file, inactive page-cache key of memory.stat) by cgroup version
_USAGE = {
    1: ("memory.usage_in_bytes", "total_inactive_file"),
    2: ("memory.current", "inactive_file"),
}


def cgroup_working_set(cgroup: CgroupDir) -> int | None:
    """A cgroup's memory charge less its inactive page cache; ``None`` when unreadable."""
    usage_file, inactive_key = _USAGE[cgroup.version]
    usage = cgroup.read_int(usage_file)
    if usage is None:
        return None
    inactive = (cgroup.read_keyed("memory.stat") or {}).get(inactive_key, 0)
    return max(usage - inactive, 0)


def process_rss(pid: int, *, root: Path) -> int | None:
    """The resident set of one process in bytes, from ``/proc/<pid>/statm``."""
    try:  # a string path: this runs once per process per gather, and pathlib costs more
        with open(f"{os.fspath(root)}/proc/{pid}/statm", "rb") as file:
            statm = file.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = statm.split()
    if len(fields) < 2 or not fields[1].isdigit():
        return None
    return int(fields[1]) * _PAGE_SIZE


def workload_bytes(
    location: WorkloadLocation, *, cgroups: CgroupFS, root: Path, ctx: MetricContext | None = None
) -> int | None:
    """Memory used by a workload, or ``None`` when it cannot be found.

    With ``ctx``, the process tree is read once per gather round for every plugin.
    """
    if location.cgroup_path is not None:
        cgroup = cgroups.directory("memory", location.cgroup_path)
        return None if cgroup is None else cgroup_working_set(cgroup)
    if location.pid is None:
        return None
    leader = location.pid
    tree = (
        process_tree(leader, root=root)
        if ctx is None
        else round_process_tree(ctx, leader, root=root)
    )
    sizes = [process_rss(pid, root=root) for pid in tree]
    found = [s for s in sizes if s is not None]
    return sum(found) if found else None


def node_metrics(used: int, total: int, device_used: int, device_size: int) -> list[NodeMetric]:
    """``mem``: the node's used / total, and the ``root`` device's use of the usable memory."""
    per_device: dict[str, Measurement] = {"root": Measurement(device_used, device_size)}
    return [NodeMetric(KEY, MetricType.GAUGE, _BYTES, Measurement(used, total), per_device)]


def workload_metrics(workload_id: str, used: int) -> list[WorkloadMetric]:
    """``mem`` of one workload."""
    return [WorkloadMetric(KEY, MetricType.GAUGE, _BYTES, workload_id, Measurement(used))]


def process_metrics(pid: int) -> list[ProcessMetric]:
    """``mem``: the RSS of one process from psutil; ``[]`` when it is gone."""
    try:
        rss = psutil.Process(pid).memory_info().rss
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []
    return [ProcessMetric(KEY, MetricType.GAUGE, _BYTES, pid, Measurement(rss))]
