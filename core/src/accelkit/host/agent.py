"""One agent's view of the node: its contexts, and allocation across plugins (DESIGN §8)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from decimal import Decimal

from accelkit.allocmap import AffinityHint, AffinityPolicy
from accelkit.errors import InvalidResourceArgument
from accelkit.partition import natural_sort_key
from accelkit.plugin import AbstractAgentContext, PluginRole
from accelkit.types import AgentId, DeviceAllocation, DeviceId, DeviceName, SlotName, parse_choice

log = logging.getLogger(__name__)

#: accelerators allocate first (their NUMA nodes guide the rest), then cores, then memory
_ALLOCATION_RANK = {PluginRole.ACCELERATOR: 0, PluginRole.CORES: 1, PluginRole.MEMORY: 2}


def plugin_key_of(slot: str, roles: Mapping[DeviceName, PluginRole]) -> DeviceName:
    """The plugin a slot belongs to, among ``roles`` (plugin key → role): ``cpu`` → the
    cores plugin, ``mem`` → the memory plugin, ``cuda.device`` → ``cuda``. A bare slot that
    no plugin's role offers is returned as it is, so callers can say nobody offers it."""
    if (role := PluginRole.of_bare_slot(slot)) is not None:
        return DeviceName(next((k for k, r in roles.items() if r is role), slot))
    return DeviceName(slot.split(".", 1)[0])


def allocation_order(roles: Mapping[DeviceName, PluginRole]) -> list[DeviceName]:
    """The keys of ``roles`` (plugin key → role): accelerators first (in natural order),
    then the cores plugin, then the memory plugin."""
    return sorted(roles, key=lambda k: (_ALLOCATION_RANK[roles[k]], natural_sort_key(k)))


class AgentView:
    """An agent's masked contexts, one per plugin, and what it may allocate."""

    def __init__(
        self,
        agent_id: AgentId,
        contexts: Mapping[DeviceName, AbstractAgentContext],
        *,
        scaling: Mapping[SlotName, Decimal] | None = None,
        affinity_policy: AffinityPolicy = AffinityPolicy.PREFER_SINGLE_NODE,
    ) -> None:
        self.agent_id = agent_id
        #: each plugin's role, by key
        self.roles: dict[DeviceName, PluginRole] = {
            key: ctx.plugin.role for key, ctx in contexts.items()
        }
        self.contexts: dict[DeviceName, AbstractAgentContext] = {
            key: contexts[key] for key in allocation_order(self.roles)
        }
        self.affinity_policy = AffinityPolicy(affinity_policy)
        self._scaling = dict(scaling or {})

    def __repr__(self) -> str:
        return f"<AgentView {self.agent_id!r} plugins={list(self.contexts)}>"

    def device_ids(self) -> dict[DeviceName, list[DeviceId]]:
        """The agent's device ids per plugin, in natural order."""
        return {
            key: sorted((d.device_id for d in ctx.list_devices()), key=natural_sort_key)
            for key, ctx in self.contexts.items()
        }

    def available_slots(self) -> dict[SlotName, Decimal]:
        """The capacity of the agent's devices per slot, over every plugin."""
        slots: dict[SlotName, Decimal] = {}
        for ctx in self.contexts.values():
            slots.update(ctx.available_slots())
        return slots

    def provider(self, role: PluginRole) -> DeviceName | None:
        """The key of the agent's plugin playing ``role`` (cores, memory), or ``None``."""
        return next((key for key, r in self.roles.items() if r is role), None)

    def plugin_of(self, slot: str) -> DeviceName:
        """The key of the plugin offering ``slot`` (see :func:`plugin_key_of`)."""
        return plugin_key_of(slot, self.roles)

    def _in_order(self, keys: Iterable[DeviceName]) -> list[DeviceName]:
        """``keys`` in allocation order (a key the agent lacks counts as an accelerator)."""
        return allocation_order({k: self.roles.get(k, PluginRole.ACCELERATOR) for k in keys})

    def scaling_factors(self) -> dict[SlotName, Decimal]:
        """Per slot: this agent's capacity over the node's allocatable capacity (SHARED: 1)."""
        return dict(self._scaling)

    def allocate(
        self,
        slots: Mapping[SlotName, Decimal],
        *,
        affinity_policy: AffinityPolicy | str | None = None,
    ) -> dict[DeviceName, DeviceAllocation]:
        """Allocate ``slots`` across plugins: accelerators first, then cores, then memory.

        The NUMA nodes of the devices taken so far are the next plugin's affinity hint. On any
        error every part already allocated is freed again and the error is re-raised, so the
        call changes nothing when it fails. A slot no plugin of this agent offers raises
        :class:`~accelkit.errors.InvalidResourceArgument`.
        """
        if not isinstance(slots, Mapping):
            msg = (
                f"agent {self.agent_id!r}: expected a mapping of slot names to amounts, "
                f"not {type(slots).__name__}"
            )
            raise InvalidResourceArgument(msg)
        try:
            policy = parse_choice(
                AffinityPolicy, affinity_policy or self.affinity_policy, "affinity policy"
            )
        except ValueError as exc:
            raise InvalidResourceArgument(str(exc)) from None
        by_key: dict[DeviceName, dict[SlotName, Decimal]] = {}
        for slot, amount in slots.items():
            key = self.plugin_of(slot)
            if key not in self.contexts:
                msg = (
                    f"agent {self.agent_id!r}: no plugin offers slot {slot!r} "
                    f"(plugins: {', '.join(self.contexts) or 'none'})"
                )
                raise InvalidResourceArgument(msg)
            by_key.setdefault(key, {})[SlotName(slot)] = amount
        done: list[tuple[DeviceName, DeviceAllocation]] = []
        numa_nodes: set[int] = set()
        try:
            for key in self._in_order(by_key):
                ctx = self.contexts[key]
                hint = AffinityHint(policy, numa_nodes)
                alloc = ctx.alloc_map.allocate(
                    by_key[key],
                    affinity_hint=hint,
                    context_tag=f"{self.agent_id}/{key}",
                )
                done.append((key, alloc))
                numa_nodes.update(
                    d.numa_node for d in ctx.alloc_to_devices(alloc) if d.numa_node is not None
                )
        except BaseException:
            self._roll_back(done)
            raise
        return {key: alloc for key, alloc in done if alloc}

    def free(self, allocation: Mapping[DeviceName, DeviceAllocation]) -> None:
        """Release what :meth:`allocate` returned (memory first, accelerators last).

        All or nothing: every part is checked against the agent's masks first, and when a
        map refuses its part, the parts already freed are taken back before the error is
        raised, so a corrected retry cannot free another agent's share.
        """
        contexts = [(key, self._context(key)) for key in reversed(self._in_order(allocation))]
        for key, ctx in contexts:
            ctx.alloc_to_devices(allocation[key])  # refuses devices outside the mask
        freed: list[tuple[DeviceName, AbstractAgentContext]] = []
        try:
            for key, ctx in contexts:
                ctx.alloc_map.free(allocation[key])
                freed.append((key, ctx))
        except BaseException:
            for key, ctx in reversed(freed):
                try:
                    ctx.alloc_map.apply_allocation(allocation[key])
                except Exception:  # taken meanwhile (SHARED mode): say so, keep the error
                    log.exception("agent %s: restoring %s after a failed free", self.agent_id, key)
            raise

    def _context(self, key: DeviceName) -> AbstractAgentContext:
        if (ctx := self.contexts.get(key)) is None:
            msg = f"agent {self.agent_id!r} has no plugin {key!r}"
            raise InvalidResourceArgument(msg)
        return ctx

    def _roll_back(self, done: list[tuple[DeviceName, DeviceAllocation]]) -> None:
        for key, alloc in reversed(done):
            try:
                self.contexts[key].alloc_map.free(alloc)
            except Exception:  # keep freeing the rest; the original error is what matters
                log.exception("agent %s: rolling back %s failed", self.agent_id, key)
