"""Which processes belong to a workload, for its GPU metrics.

A workload whose id is ``pid:<n>`` (what ``accelkit run`` records for a process tree) or a
bare decimal number is the process tree led by that pid (the leader and all its descendants);
any other id maps to no processes, so its GPU metrics are left out rather than reported as
zero. A plugin user with another convention (container ids, cgroups) passes its own
:data:`WorkloadPids`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import psutil

from accelkit.types import Workload

#: maps a workload to the pids whose GPU use counts as its own
WorkloadPids = Callable[[Workload], Iterable[int]]


def leader_pid(workload_id: str) -> int | None:
    """The pid a workload id names: ``pid:1234`` or ``1234``; ``None`` for any other id."""
    number = workload_id.removeprefix("pid:")
    return int(number) if number.isascii() and number.isdecimal() else None


def leader_process_tree(workload: Workload) -> frozenset[int]:
    """The leader pid named by the workload id and its descendants; empty when unknown."""
    pid = leader_pid(workload.id)
    if pid is None:
        return frozenset()
    try:
        leader = psutil.Process(pid)
        children = leader.children(recursive=True)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return frozenset()
    return frozenset({leader.pid, *(child.pid for child in children)})
