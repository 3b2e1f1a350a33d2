"""``GetPreferredAllocation``: which of the kubelet's available devices to give a container.

The alloc maps' default policy (prefer a single NUMA node) applied to the kubelet's choice: the
devices the kubelet must include come first; the rest are taken from the NUMA nodes those
devices sit on, then from the smallest node that holds all the rest (a request that fits on one
node stays on one, and larger free nodes stay whole), else the largest; natural order within
a node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from accelkit.partition import natural_sort_key

__all__ = ["preferred_devices"]


def preferred_devices(
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    numa_of: Mapping[str, int | None],
) -> list[str]:
    """``size`` ids from ``available``, ``must_include`` first; fewer only if too few exist."""
    chosen = list(dict.fromkeys(must_include))
    rest = [d for d in dict.fromkeys(available) if d not in chosen]
    wanted = max(size - len(chosen), 0)
    if not wanted:
        return chosen
    by_node: dict[int | None, list[str]] = {}
    for device in sorted(rest, key=natural_sort_key):
        by_node.setdefault(numa_of.get(device), []).append(device)
    anchored = {numa_of.get(d) for d in chosen}
    order = sorted(
        by_node,
        key=lambda node: (
            node not in anchored,  # the nodes of the devices already chosen first
            len(by_node[node]) < wanted,  # then a node that holds the whole rest
            # the smallest such node (the larger stay whole), else the largest
            len(by_node[node]) if len(by_node[node]) >= wanted else -len(by_node[node]),
            node is None,  # devices of no known node last
            0 if node is None else node,
        ),
    )
    for node in order:
        take = by_node[node][:wanted]
        chosen += take
        wanted -= len(take)
        if not wanted:
            break
    return chosen
