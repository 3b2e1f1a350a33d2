"""One agent's view of the node: its contexts, and allocation across plugins (DESIGN §8)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from decimal import Decimal

from accelkit.allocmap import AffinityHint, AffinityPolicy
from accelkit.errors import InvalidResourceArgument
from accelkit.partition import natural_sort_key
from accelkit.plugin import AbstractAgentContext
from accelkit.types import AgentId, DeviceAllocation, DeviceId, DeviceName, SlotName

log = logging.getLogger(__name__)

#: slots named without their plugin's key as prefix
BARE_SLOTS = frozenset({"cpu", "mem"})


def plugin_key_of(slot: str) -> DeviceName:
    """The plugin a slot belongs to: ``cpu`` → cpu, ``mem`` → mem, ``cuda.device`` → cuda."""
    return DeviceName(slot if slot in BARE_SLOTS else slot.split(".", 1)[0])


def allocation_order(keys: Iterable[str]) -> list[DeviceName]:
    """Accelerators first (in natural order), then ``cpu``, then ``mem``."""
    rank = {"cpu": 1, "mem": 2}
    return [
        DeviceName(k) for k in sorted(keys, key=lambda k: (rank.get(k, 0), natural_sort_key(k)))
    ]


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
        self.contexts: dict[DeviceName, AbstractAgentContext] = {
            key: contexts[key] for key in allocation_order(contexts)
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

    def scaling_factors(self) -> dict[SlotName, Decimal]:
        """Per slot: this agent's capacity over the node's allocatable capacity (SHARED: 1)."""
        return dict(self._scaling)

    def allocate(
        self,
        slots: Mapping[SlotName, Decimal],
        *,
        affinity_policy: AffinityPolicy | str | None = None,
    ) -> dict[DeviceName, DeviceAllocation]:
        """Allocate ``slots`` across plugins: accelerators first, then cpu, then mem.

        The NUMA nodes of the devices taken so far are the next plugin's affinity hint. On any
        error every part already allocated is freed again and the error is re-raised, so the
        call changes nothing when it fails. A slot no plugin of this agent offers raises
        :class:`~accelkit.errors.InvalidResourceArgument`.
        """
        policy = AffinityPolicy(affinity_policy or self.affinity_policy)
        by_key: dict[DeviceName, dict[SlotName, Decimal]] = {}
        for slot, amount in slots.items():
            key = plugin_key_of(slot)
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
            for key in allocation_order(by_key):
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
        """Release what :meth:`allocate` returned (mem first, accelerators last).

        All or nothing: every part is checked against the agent's masks first, and when a
        map refuses its part, the parts already freed are taken back before the error is
        raised, so a corrected retry cannot free another agent's share.
        """
        contexts = [(key, self._context(key)) for key in reversed(allocation_order(allocation))]
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
