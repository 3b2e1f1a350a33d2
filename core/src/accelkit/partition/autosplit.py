"""AUTO_SPLIT of one plugin's devices: per slot type, and optionally NUMA-aware (DESIGN §6).

Each slot type of a plugin (whole GPUs, each MIG profile) is split among the agents on its
own, so no agent ends up with only partitions while another holds every whole device. The
agents that get one device more than the others rotate from one slot type to the next, so
the totals stay within one of each other as well. Without NUMA awareness each agent gets a
contiguous run of the slot type's devices in natural order (fill-from-front, as
:func:`~accelkit.partition.distribute_devices`); with it, each agent's devices come from as
few NUMA nodes as the counts allow, preferring the nodes an agent already has devices on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from accelkit.partition.model import GlobalDeviceInfo
from accelkit.partition.ordering import natural_sort_key
from accelkit.types import AgentId, DeviceId, SlotName

Node = int | None


def node_key(node: Node) -> tuple[int, int]:
    """Sort key of NUMA nodes; devices without a known node sort after every node."""
    return (1, 0) if node is None else (0, node)


def split_counts(total: int, agents: Sequence[AgentId], first_extra: int) -> dict[AgentId, int]:
    """``total`` devices over ``agents`` within one of each other; the extra ones go to the
    agents from index ``first_extra`` on (wrapping around)."""
    quotient, remainder = divmod(total, len(agents))
    n = len(agents)
    return {a: quotient + ((i - first_extra) % n < remainder) for i, a in enumerate(agents)}


def by_slot_type(info: GlobalDeviceInfo, ids: Sequence[DeviceId]) -> list[list[DeviceId]]:
    """``ids`` grouped by the slot each device offers, slots and ids in natural order."""
    groups: dict[SlotName, list[DeviceId]] = {}
    for dev in ids:
        slot = info.device_slots[dev].slot_name if dev in info.device_slots else SlotName("")
        groups.setdefault(slot, []).append(dev)
    return [sorted(groups[s], key=natural_sort_key) for s in sorted(groups, key=natural_sort_key)]


def split_plugin(
    info: GlobalDeviceInfo,
    ids: Sequence[DeviceId],
    agents: Sequence[AgentId],
    *,
    numa_aware: bool,
    preferred: Mapping[AgentId, Sequence[Node]] | None = None,
) -> dict[AgentId, tuple[DeviceId, ...]]:
    """Split one plugin's free devices ``ids`` among ``agents``, each slot type on its own.

    ``preferred`` (NUMA-aware only) names, per agent, the nodes to take its devices from
    first (the nodes of its accelerators, when splitting cpu cores).
    """
    nodes = {d.device_id: d.numa_node for d in info.devices}
    result: dict[AgentId, list[DeviceId]] = {a: [] for a in agents}
    first_extra = 0
    for group in by_slot_type(info, ids):
        counts = split_counts(len(group), agents, first_extra)
        first_extra = (first_extra + len(group) % len(agents)) % len(agents)
        if numa_aware:
            parts = pack_by_node(group, nodes, counts, agents, preferred or {})
        else:
            parts, start = {}, 0
            for agent in agents:
                parts[agent] = group[start : start + counts[agent]]
                start += counts[agent]
        for agent in agents:
            result[agent].extend(parts[agent])
    return {a: tuple(sorted(result[a], key=natural_sort_key)) for a in agents}


def pack_by_node(
    ids: Sequence[DeviceId],
    nodes: Mapping[DeviceId, Node],
    counts: Mapping[AgentId, int],
    agents: Sequence[AgentId],
    preferred: Mapping[AgentId, Sequence[Node]],
) -> dict[AgentId, list[DeviceId]]:
    """Give each agent ``counts[agent]`` of ``ids`` from as few NUMA nodes as possible.

    Agents with preferred nodes go first and take from those nodes; then the largest counts
    go first, each to the node with the fewest devices left that still holds all it needs
    (keeping roomier nodes for larger counts), else from the nodes with the most left.
    """
    left: dict[Node, list[DeviceId]] = {}
    for dev in ids:
        left.setdefault(nodes.get(dev), []).append(dev)
    order = sorted(
        range(len(agents)), key=lambda i: (not preferred.get(agents[i]), -counts[agents[i]], i)
    )
    out: dict[AgentId, list[DeviceId]] = {a: [] for a in agents}
    for index in order:
        agent = agents[index]
        need = counts[agent]
        for node in preferred.get(agent, ()):
            devs = left.get(node, [])
            take = devs[:need]
            out[agent].extend(take)
            del devs[: len(take)]
            need -= len(take)
        if need:
            fitting = [n for n, devs in left.items() if len(devs) >= need]
            if fitting:
                chosen = [min(fitting, key=lambda n: (len(left[n]), node_key(n)))]
            else:
                chosen = sorted(left, key=lambda n: (-len(left[n]), node_key(n)))
            for node in chosen:
                take = left[node][:need]
                out[agent].extend(take)
                del left[node][: len(take)]
                need -= len(take)
                if not need:
                    break
    return out
