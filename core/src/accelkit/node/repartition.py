"""``accelkit repartition``: unassigned devices given to agents, only free devices moved.

In AUTO_SPLIT each slot type of a plugin is split on its own. A repartition aims at the counts
a fresh split would give each agent (``q + 1`` for the first ``r`` agents, ``q`` for the rest)
while keeping devices where they are: an agent over its count gives up free devices (never one
a workload holds), agents under it take the unassigned and given-up devices in natural order.
The result is pinned in the state dir (:mod:`accelkit.host.pinning`), so every later process
(``accelkit run``, ``serve``'s next rediscovery) uses it; this process's node gets new contexts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import attrs

from accelkit.config.model import AllocationMode
from accelkit.errors import InvalidResourceArgument
from accelkit.host import AgentView
from accelkit.host.pinning import PinnedAssignment
from accelkit.node.assignments import update_pinned
from accelkit.node.context_swap import reassign
from accelkit.node.health_maps import fence_maps
from accelkit.node.node import Node
from accelkit.partition import distribute_devices, natural_sort_key
from accelkit.types import AgentId, DeviceId, DeviceName

__all__ = ["Repartition", "plan_slot_type", "repartition"]


@attrs.frozen
class Repartition:
    """Each agent's devices after the repartition; what was given and moved, per plugin."""

    agents: Mapping[AgentId, Mapping[DeviceName, tuple[DeviceId, ...]]]
    #: device -> the agent that got it (it was unassigned)
    given: Mapping[DeviceName, Mapping[DeviceId, AgentId]]
    #: device -> (from agent, to agent); only free devices move
    moved: Mapping[DeviceName, Mapping[DeviceId, tuple[AgentId, AgentId]]]

    def to_json(self) -> dict[str, object]:
        """The shape ``accelkit repartition --json`` prints."""
        return {
            "agents": {a: {k: list(ids) for k, ids in d.items()} for a, d in self.agents.items()},
            "given": {k: dict(v) for k, v in self.given.items()},
            "moved": {k: {d: list(m) for d, m in v.items()} for k, v in self.moved.items()},
        }


def _sorted(ids: Iterable[DeviceId]) -> list[DeviceId]:
    return sorted(ids, key=natural_sort_key)


def plan_slot_type(
    current: Mapping[AgentId, Sequence[DeviceId]],
    pool: Sequence[DeviceId],
    held: frozenset[DeviceId],
) -> dict[AgentId, list[DeviceId]]:
    """The devices of one slot type per agent after a repartition (see the module docstring).

    An unassigned device that a workload holds (booked under another partition) stays
    unassigned until it is released: only free devices are given or moved. Raises
    ``InvalidResourceArgument`` when an agent would have to give up a held device.
    """
    agents = list(current)
    free_pool = [d for d in pool if d not in held]
    everything = [*(d for ids in current.values() for d in ids), *free_pool]
    counts = {a: len(ids) for a, ids in distribute_devices(everything, agents).items()}
    result: dict[AgentId, list[DeviceId]] = {}
    for agent in agents:
        mine = _sorted(current[agent])
        keep = [d for d in mine if d in held]
        if len(keep) > counts[agent]:
            msg = (
                f"agent {agent!r} would give up a device a workload holds "
                f"({', '.join(keep)} are held; it may keep {counts[agent]}): release a workload "
                "first"
            )
            raise InvalidResourceArgument(msg)
        for device in mine:
            if device not in held and len(keep) < counts[agent]:
                keep.append(device)
            elif device not in held:
                free_pool.append(device)
        result[agent] = _sorted(keep)
    free_pool = _sorted(free_pool)
    for agent in agents:
        while len(result[agent]) < counts[agent] and free_pool:
            result[agent].append(free_pool.pop(0))
        result[agent] = _sorted(result[agent])
    return result


async def repartition(node: Node) -> Repartition:
    """Repartition a started node in AUTO_SPLIT; pin and apply the result.

    Raises ``InvalidResourceArgument`` in another mode, with one agent, or when a held device
    would move (nothing is changed then).
    """
    host = node.host
    mode = host.result.mode
    if mode is not AllocationMode.AUTO_SPLIT:
        msg = (
            f"repartition works in allocation-mode 'auto-split' with several agents; this node "
            f"is {mode.value!r}"
            + (
                " (new devices join the agents by themselves)"
                if mode is AllocationMode.SHARED
                else " (assign devices in [agents.resource])"
            )
        )
        raise InvalidResourceArgument(msg)
    ledger = node.bookkeeper.ledger
    after: dict[DeviceName, dict[AgentId, list[DeviceId]]] = {}
    for key, info in host.device_map.items():
        if info.shared_by_amount:
            continue
        current = {a: _sorted(v.contexts[key].device_mask) for a, v in host.agents.items()}
        pool = list(host.result.unassigned.get(key, ()))
        held = frozenset(h.device_id for h in ledger.holders(key, [*info.device_ids]))
        by_slot: dict[str, list[DeviceId]] = {}
        for device in [*(d for ids in current.values() for d in ids), *pool]:
            by_slot.setdefault(str(info.device_slots[device].slot_name), []).append(device)
        merged: dict[AgentId, list[DeviceId]] = {a: [] for a in current}
        for ids in by_slot.values():
            group = set(ids)
            part = plan_slot_type(
                {a: [d for d in mine if d in group] for a, mine in current.items()},
                [d for d in pool if d in group],
                held,
            )
            for agent, devices in part.items():
                merged[agent] += devices
        after[key] = {a: _sorted(ids) for a, ids in merged.items()}
    given, moved = _changes(host.agents, host.result.unassigned, after)
    agents = tuple(host.agents)

    def pin(current: PinnedAssignment | None) -> PinnedAssignment:
        base = current if current is not None and current.agents == agents else None
        pinned = base or PinnedAssignment(agents, {})
        for key, masks in after.items():
            pinned = pinned.evolve(key, {a: tuple(ids) for a, ids in masks.items()})
        return pinned

    update_pinned(node.config.resource.state_dir, pin, source=node.config.source_name)
    timeout = float(node.config.plugins.call_timeout)

    def fence() -> None:
        fence_maps(host, node.health)

    for key, masks in after.items():
        target = {a: tuple(i) for a, i in masks.items()}
        await reassign(host, key, target, call_timeout=timeout, fence=fence)
    return Repartition(
        {a: {k: tuple(after[k][a]) for k in after} for a in agents},
        given,
        moved,
    )


def _changes(
    views: Mapping[AgentId, AgentView],
    unassigned: Mapping[DeviceName, Sequence[DeviceId]],
    after: Mapping[DeviceName, Mapping[AgentId, Sequence[DeviceId]]],
) -> tuple[
    dict[DeviceName, dict[DeviceId, AgentId]],
    dict[DeviceName, dict[DeviceId, tuple[AgentId, AgentId]]],
]:
    given: dict[DeviceName, dict[DeviceId, AgentId]] = {}
    moved: dict[DeviceName, dict[DeviceId, tuple[AgentId, AgentId]]] = {}
    for key, masks in after.items():
        owner = {d: a for a, v in views.items() for d in v.contexts[key].device_mask}
        for agent, ids in masks.items():
            for device in ids:
                if device in unassigned.get(key, ()):
                    given.setdefault(key, {})[device] = agent
                elif owner.get(device) not in (None, agent):
                    moved.setdefault(key, {})[device] = (owner[device], agent)
    return given, moved
