"""Which processes belong to a workload, for its GPU metrics.

Convention until the lifecycle driver fixes one: a workload whose id is a decimal number is
the process tree led by that pid (the leader and all its descendants); any other id maps to
no processes, so its GPU metrics are left out rather than reported as zero. A plugin user
with another convention (container ids, cgroups) passes its own :data:`WorkloadPids`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import psutil

from accelkit.types import Workload

#: maps a workload to the pids whose GPU use counts as its own
WorkloadPids = Callable[[Workload], Iterable[int]]


def leader_process_tree(workload: Workload) -> frozenset[int]:
    """The leader pid named by the workload id and its descendants; empty when unknown."""
    if not workload.id.isdecimal():
        return frozenset()
    try:
        leader = psutil.Process(int(workload.id))
        children = leader.children(recursive=True)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return frozenset()
    return frozenset({leader.pid, *(child.pid for child in children)})
