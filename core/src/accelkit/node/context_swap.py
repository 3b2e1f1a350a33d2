"""New contexts for a plugin whose devices changed: masks are never changed in place.

When a rediscovery adds devices to what agents may allocate (SHARED mode, or one agent), each
agent gets a new context over its new mask, and the allocations of the old maps move to the
new maps in the same step of the event loop as the swap, so no grant is lost or doubled.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal

from accelkit.allocmap import AbstractAllocMap
from accelkit.calls import call_sync
from accelkit.errors import InvalidResourceArgument
from accelkit.host import PartitionHost
from accelkit.host.host import device_info
from accelkit.node.health_maps import install_fences
from accelkit.partition.model import DevicePartition
from accelkit.plugin import AbstractAgentContext, MaskedAgentContext
from accelkit.types import AgentId, DeviceAllocation, DeviceId, DeviceName, SlotName

__all__ = ["held_allocations", "reassign", "shares_of", "widen_masks"]

log = logging.getLogger(__name__)


def held_allocations(alloc_map: AbstractAllocMap) -> DeviceAllocation:
    """What ``alloc_map`` has granted, zeros left out (what a new map must take over)."""
    held: dict[SlotName, dict[DeviceId, Decimal]] = {}
    for slot, per_device in alloc_map.allocations.items():
        granted = {device: amount for device, amount in per_device.items() if amount}
        if granted:
            held[slot] = granted
    return held


async def widen_masks(
    host: PartitionHost,
    key: DeviceName,
    added: Iterable[DeviceId],
    *,
    call_timeout: float,
    fence: Callable[[], None],
) -> tuple[AgentId, ...]:
    """Give ``added`` devices of plugin ``key`` to every agent whose partition is by device.

    The agents that got them; an agent whose share of the plugin is by amount (memory) keeps
    its context. The plugin must already list the devices (``remember_devices``). ``fence()``
    tells the new maps which devices take no grant, right after the swap.
    """
    plugin = host.plugins[key]
    extra = tuple(added)
    fresh: dict[AgentId, AbstractAgentContext] = {}
    for agent_id, view in host.agents.items():
        old = view.contexts.get(key)
        if old is None or not isinstance(old.partition, DevicePartition):
            continue
        partition = DevicePartition((*old.partition.device_ids, *extra))
        create = functools.partial(plugin.create_agent_context, agent_id, partition)
        fresh[agent_id] = await call_sync(key, "create_agent_context", call_timeout, create)
    if not fresh:
        return ()
    # from here to the swap nothing awaits: no booking can come between the copy and the swap
    moved: dict[int, AbstractAllocMap] = {}
    for agent_id, ctx in fresh.items():
        old_map = host.agents[agent_id].contexts[key].alloc_map
        if (shared := moved.get(id(old_map))) is not None and isinstance(ctx, MaskedAgentContext):
            ctx.share_alloc_map(shared)
            continue
        ctx.alloc_map.apply_allocation(held_allocations(old_map))
        moved[id(old_map)] = ctx.alloc_map
    replaced = host.replace_contexts(key, fresh, device_info(plugin))
    install_fences(host)
    fence()  # the new maps exclude unhealthy and cordoned devices before any await
    for ctx in replaced:
        try:
            await ctx.close()
        except Exception:
            log.warning("closing %r failed", ctx, exc_info=True)
    return tuple(fresh)


def shares_of(host: PartitionHost, key: DeviceName) -> Mapping[AgentId, frozenset[DeviceId]]:
    """Each agent's mask of plugin ``key``."""
    return {
        agent_id: view.contexts[key].device_mask
        for agent_id, view in host.agents.items()
        if key in view.contexts
    }


async def reassign(
    host: PartitionHost,
    key: DeviceName,
    masks: Mapping[AgentId, tuple[DeviceId, ...]],
    *,
    call_timeout: float,
    fence: Callable[[], None],
) -> tuple[AgentId, ...]:
    """New contexts of plugin ``key`` for the agents whose mask differs from ``masks``.

    Each new map takes the allocations of the agent's old map. A device that moves must be
    free: when an old map holds an allocation outside the new mask, nothing is swapped and
    ``InvalidResourceArgument`` names the device.
    """
    plugin = host.plugins[key]
    changed = {
        agent_id: DevicePartition(ids)
        for agent_id, ids in masks.items()
        if agent_id in host.agents
        and key in host.agents[agent_id].contexts
        and host.agents[agent_id].contexts[key].device_mask != frozenset(ids)
    }
    fresh: dict[AgentId, AbstractAgentContext] = {}
    for agent_id, partition in changed.items():
        create = functools.partial(plugin.create_agent_context, agent_id, partition)
        fresh[agent_id] = await call_sync(key, "create_agent_context", call_timeout, create)
    if not fresh:
        return ()
    # from here to the swap nothing awaits: no booking can come between the copy and the swap
    for agent_id, ctx in fresh.items():
        held = held_allocations(host.agents[agent_id].contexts[key].alloc_map)
        outside = sorted({d for per in held.values() for d in per} - ctx.device_mask)
        if outside:
            msg = (
                f"agent {agent_id!r} holds {key} device(s) {', '.join(outside)}: a device a "
                "workload holds never moves"
            )
            raise InvalidResourceArgument(msg)
        ctx.alloc_map.apply_allocation(held)
    replaced = host.replace_contexts(key, fresh, device_info(plugin))
    install_fences(host)
    fence()  # the new maps exclude unhealthy and cordoned devices before any await
    for ctx in replaced:
        try:
            await ctx.close()
        except Exception:
            log.warning("closing %r failed", ctx, exc_info=True)
    return tuple(fresh)
