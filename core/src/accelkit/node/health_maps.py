"""Fencing the alloc maps: devices that take no new grant, in every map that could grant them."""

from __future__ import annotations

import logging
from typing import Protocol, cast, runtime_checkable

from accelkit.allocmap import AbstractAllocMap
from accelkit.host import PartitionHost
from accelkit.node.health_board import HealthBoard
from accelkit.node.health_fence import FencedMap
from accelkit.plugin import MaskedAgentContext
from accelkit.types import DeviceId

__all__ = ["Fenceable", "fence_maps", "install_fences"]

log = logging.getLogger(__name__)


@runtime_checkable
class Fenceable(Protocol):
    """An alloc map that can keep devices out of new grants (frees and applies still work)."""

    def set_unavailable(self, device_ids: frozenset[DeviceId]) -> None: ...


def install_fences(host: PartitionHost) -> None:
    """Wrap each map that has no ``set_unavailable`` in a :class:`FencedMap`.

    A map shared by several agents (SHARED mode) gets one wrapper, shared the same way.
    """
    wrappers: dict[int, FencedMap] = {}
    for agent in host.agents.values():
        for key, ctx in agent.contexts.items():
            inner = ctx.alloc_map
            if isinstance(inner, Fenceable):
                continue
            if not isinstance(ctx, MaskedAgentContext):
                log.warning("plugin %r: %s cannot be fenced", key, type(ctx).__name__)
                continue
            if (wrapper := wrappers.get(id(inner))) is None:
                wrapper = wrappers[id(inner)] = FencedMap(inner, ctx.plugin.create_alloc_map)
            ctx.share_alloc_map(cast("AbstractAllocMap", wrapper))


def fence_maps(host: PartitionHost, board: HealthBoard) -> None:
    """Tell every distinct alloc map which of its devices are unallocatable now.

    SHARED mode hands the one map of a plugin to every agent; it is told once. In the split
    modes each agent's map is told about the devices of its own mask.
    """
    seen: set[int] = set()
    for agent in host.agents.values():
        for key, ctx in agent.contexts.items():
            alloc_map = ctx.alloc_map
            if id(alloc_map) in seen:
                continue
            seen.add(id(alloc_map))
            if not isinstance(alloc_map, Fenceable):
                log.warning("alloc map of plugin %r cannot exclude devices", key)
                continue
            alloc_map.set_unavailable(board.unallocatable(key) & frozenset(alloc_map.device_slots))
