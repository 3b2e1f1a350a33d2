"""Other processes' records applied node-wide, whatever partition they were booked under.

A record names the agent that booked it and the devices it holds (plugin and device id). The
partition of the process that reads it may differ (another config, an agent added or removed,
another mode): its agent may be unknown here, or its devices may now fall to other agents.
Applying the record to its agent's maps alone would then leave the devices free in the maps of
the agents that have them now, and a second workload would get them.

:class:`NodeWideAgents` is the host's agents as the reconciler sees them: every agent id, known
or not, has a view whose alloc maps place each device of a record in the map of the agent that
has the device *now* (its own agent first), so a held device is taken in every map that could
grant it. A device no agent has (unassigned, reserved) is held nowhere, and nobody can be
granted it. Where each part went is remembered, so freeing the record frees exactly that.
"""

from __future__ import annotations

from collections.abc import Container, Iterator, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, cast

from accelkit.errors import InvalidResourceArgument
from accelkit.types import (
    AgentId,
    DeviceAllocation,
    DeviceId,
    DeviceName,
    DeviceSlotInfo,
    SlotName,
    Workload,
)

if TYPE_CHECKING:
    from accelkit.allocmap import AbstractAllocMap
    from accelkit.host import AgentView
    from accelkit.plugin import AbstractAgentContext, AbstractLifecycleHook

__all__ = ["NodeWideAgents"]

#: (the agent whose map took it, the part it took)
Placement = list[tuple[AgentId, DeviceAllocation]]


class _RoutedMap:
    """The alloc map a record of ``agent_id`` sees for plugin ``key`` (module docstring)."""

    def __init__(self, agents: NodeWideAgents, agent_id: AgentId, key: DeviceName) -> None:
        self._agents = agents
        self._agent_id = agent_id
        self._key = key

    def candidates(self) -> list[tuple[AgentId, AbstractAgentContext]]:
        """The agents with a context of the plugin: the record's own first, then in order."""
        live = self._agents.live
        order = [self._agent_id, *(a for a in live if a != self._agent_id)]
        return [(a, live[a].contexts[self._key]) for a in order if self._has(a)]

    def _has(self, agent_id: AgentId) -> bool:
        view = self._agents.live.get(agent_id)
        return view is not None and self._key in view.contexts

    def _targets(
        self, alloc: DeviceAllocation
    ) -> dict[tuple[AgentId, ...], dict[SlotName, dict[DeviceId, Decimal]]]:
        """The parts of ``alloc`` by the agents whose maps may take them: the record's own
        agent alone where it has the device, else every agent that has it now, in order."""
        candidates = self.candidates()
        own: tuple[AgentId, ...] = (self._agent_id,)
        # the record's own agent, where it has the plugin (it comes first): most devices are its
        mask = candidates[0][1].device_mask if candidates and candidates[0][0] == own[0] else ()
        parts: dict[tuple[AgentId, ...], dict[SlotName, dict[DeviceId, Decimal]]] = {}
        for slot, per_device in alloc.items():
            for device, amount in per_device.items():
                if device in mask:
                    owners = own
                else:
                    owners = tuple(a for a, ctx in candidates if device in ctx.device_mask)
                if not owners or not amount:
                    continue  # no agent has it: nobody can be granted it
                if owners[0] == self._agent_id:
                    owners = owners[:1]
                parts.setdefault(owners, {}).setdefault(slot, {})[device] = amount
        return parts

    def apply_allocation(self, alloc: DeviceAllocation) -> None:
        """Take each device's amount in the map of the agent that has it now; atomic."""
        own = self._agents.live.get(self._agent_id)
        ctx = None if own is None else own.contexts.get(self._key)
        if ctx is not None and _held_within(alloc, ctx.device_mask):
            # the record's own agent has every device (most records): its map takes it whole
            ctx.alloc_map.apply_allocation(alloc)
            placement = [(self._agent_id, alloc)]
            self._agents.placed.setdefault((self._agent_id, self._key), []).append(
                (alloc, placement)
            )
            return
        done: Placement = []
        try:
            for owners, part in self._targets(alloc).items():
                done.append(self._place(owners, part))
        except BaseException:
            for agent_id, taken in reversed(done):
                self._map_of(agent_id).free(taken)
            raise
        self._agents.placed.setdefault((self._agent_id, self._key), []).append((alloc, done))

    def _place(
        self, owners: tuple[AgentId, ...], part: DeviceAllocation
    ) -> tuple[AgentId, DeviceAllocation]:
        """``part`` applied in the first owner's map that takes it (memory, split by amount
        among agents, may fit in another agent's share)."""
        error: InvalidResourceArgument | None = None
        seen: set[int] = set()
        for agent_id in owners:
            alloc_map = self._map_of(agent_id)
            if id(alloc_map) in seen:
                continue
            seen.add(id(alloc_map))
            try:
                alloc_map.apply_allocation(part)
            except InvalidResourceArgument as exc:
                error = error or exc
                continue
            return agent_id, part
        assert error is not None
        raise error

    def _map_of(self, agent_id: AgentId) -> AbstractAllocMap:
        return self._agents.live[agent_id].contexts[self._key].alloc_map

    def free(self, alloc: DeviceAllocation) -> None:
        """Free ``alloc`` where it was placed (or from the agent's own map, if it booked it)."""
        placed = self._agents.placed.get((self._agent_id, self._key), [])
        for index, (whole, parts) in enumerate(placed):
            if whole == alloc:
                for agent_id, part in parts:
                    self._map_of(agent_id).free(part)
                del placed[index]
                return
        self._map_of(self._agent_id).free(alloc)

    @property
    def allocations(self) -> Mapping[SlotName, Mapping[DeviceId, Decimal]]:
        """What is allocated on each device, in the map of the agent that has it now."""
        merged: dict[SlotName, dict[DeviceId, Decimal]] = {}
        for _agent, ctx in reversed(self.candidates()):  # the record's own agent wins
            for slot, per_device in ctx.alloc_map.allocations.items():
                merged.setdefault(slot, {}).update(
                    {d: a for d, a in per_device.items() if d in ctx.device_mask}
                )
        return merged

    @property
    def device_slots(self) -> Mapping[DeviceId, DeviceSlotInfo]:
        """Each device's capacity, in the map of the agent that has it now."""
        merged: dict[DeviceId, DeviceSlotInfo] = {}
        for _agent, ctx in reversed(self.candidates()):
            merged.update(
                {d: s for d, s in ctx.alloc_map.device_slots.items() if d in ctx.device_mask}
            )
        return merged


def _held_within(alloc: DeviceAllocation, mask: Container[DeviceId]) -> bool:
    """Whether ``alloc`` holds something, and of every slot a non-zero amount of devices of
    ``mask`` only: what :meth:`_RoutedMap._targets` would give the record's own agent whole."""
    if not alloc:
        return False
    for per_device in alloc.values():
        if not per_device:
            return False
        for device, amount in per_device.items():
            if not amount or device not in mask:
                return False
    return True


class _RoutedContext:
    """A plugin's context as a record of ``agent_id`` sees it: routed map, hooks."""

    def __init__(self, agents: NodeWideAgents, agent_id: AgentId, key: DeviceName) -> None:
        self._map = _RoutedMap(agents, agent_id, key)
        self._contexts = self._map.candidates

    @property
    def alloc_map(self) -> AbstractAllocMap:
        return cast("AbstractAllocMap", self._map)

    def create_lifecycle_hook(
        self, workload: Workload, device_alloc: DeviceAllocation
    ) -> AbstractLifecycleHook:
        """The hook from the first context (the record's agent's first) whose mask holds
        every device of ``device_alloc``: hooks are stateless, the devices are what count."""
        devices = {d for per_device in device_alloc.values() for d in per_device}
        contexts = [ctx for _agent, ctx in self._contexts()]
        for ctx in contexts:
            if devices <= ctx.device_mask:
                return ctx.create_lifecycle_hook(workload, device_alloc)
        if not contexts:
            msg = "no agent of this node has the plugin"
            raise InvalidResourceArgument(msg)
        return contexts[0].create_lifecycle_hook(workload, device_alloc)  # names the devices


class _RoutedView:
    """An agent's view for the reconciler: a routed context for each plugin of ``keys``
    (every plugin of the node)."""

    def __init__(
        self, agents: NodeWideAgents, agent_id: AgentId, keys: tuple[DeviceName, ...]
    ) -> None:
        self.agent_id = agent_id
        self.keys = keys
        self.contexts: dict[DeviceName, _RoutedContext] = {
            k: _RoutedContext(agents, agent_id, k) for k in keys
        }


class NodeWideAgents(Mapping[AgentId, "AgentView"]):
    """The host's agents for the reconciler: any agent id, devices placed node-wide.

    ``live`` is the host's own (changing) ``agents`` dict. Iterating lists its agents; looking
    up any agent id, one this node does not have included, gives a routed view.
    """

    def __init__(self, live: Mapping[AgentId, AgentView]) -> None:
        self.live = live
        #: per (record's agent, plugin): each applied allocation and where its parts went
        self.placed: dict[tuple[AgentId, DeviceName], list[tuple[DeviceAllocation, Placement]]] = {}
        #: per agent id, its view (routed contexts look the live agents up as they are
        #: used: a view holds only the node's plugin keys, and is made again when they change)
        self._views: dict[AgentId, _RoutedView] = {}

    def __getitem__(self, agent_id: AgentId) -> AgentView:
        live = self.live
        if len(live) == 1:  # a node of one agent (shared mode): its plugins, as they are
            keys = tuple(next(iter(live.values())).contexts)
        else:
            keys = tuple({k: None for view in live.values() for k in view.contexts})
        view = self._views.get(agent_id)
        if view is None or view.keys != keys:
            view = self._views[agent_id] = _RoutedView(self, agent_id, keys)
        return cast("AgentView", view)

    def __iter__(self) -> Iterator[AgentId]:
        return iter(self.live)

    def __len__(self) -> int:
        return len(self.live)

    def __contains__(self, agent_id: object) -> bool:
        return agent_id in self.live
