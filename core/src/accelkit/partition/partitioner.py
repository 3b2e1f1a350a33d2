"""Splitting the node's devices among agents in the three allocation modes (DESIGN §6)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal

import attrs

from accelkit.config.model import AgentConfig, AllocationMode, ResourceConfig
from accelkit.errors import ConfigError
from accelkit.partition.autosplit import Node, node_key, split_plugin
from accelkit.partition.model import (
    DevicePartition,
    GlobalDeviceInfo,
    GlobalDeviceMap,
    Partition,
    ResourceAssignments,
    SlotPartition,
)
from accelkit.partition.ordering import natural_sort_key
from accelkit.partition.problems import ProblemList, listing
from accelkit.partition.reserve import Reservation, reserve
from accelkit.partition.scaling import partition_capacity, scaling_factors
from accelkit.partition.scaling import plain_amounts as _plain
from accelkit.plugin import PluginRole
from accelkit.reprs import attrs_eq, attrs_hash, attrs_repr
from accelkit.types import AgentId, DeviceId, DeviceName, SlotName, SlotType

_ZERO = Decimal(0)
_ONE = Decimal(1)


@attrs.frozen(repr=False)
class PartitionResult:
    """The outcome of partitioning: who gets what, and what is left over.

    ``mode`` is the mode that was applied (one agent is always SHARED); ``allocatable`` is the
    node's capacity per slot after the reservation; ``capacity`` and ``scaling`` are per agent.
    """

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    mode: AllocationMode
    assignments: ResourceAssignments
    reservation: Reservation
    allocatable: Mapping[SlotName, Decimal]
    capacity: Mapping[AgentId, Mapping[SlotName, Decimal]]
    scaling: Mapping[AgentId, Mapping[SlotName, Decimal]]
    unassigned: Mapping[DeviceName, tuple[DeviceId, ...]]
    warnings: tuple[str, ...] = ()
    #: per agent, the NUMA nodes its devices sit on (devices without a known node left out)
    numa_nodes: Mapping[AgentId, tuple[int, ...]] = attrs.field(factory=dict)
    #: each plugin's role, by device name
    roles: Mapping[DeviceName, PluginRole] = attrs.field(factory=dict)


class ResourcePartitioner:
    """Computes :data:`ResourceAssignments` over a node's discovered devices.

    Reserved cores and memory come off first. Problems with the configuration are
    :class:`~accelkit.errors.ConfigError` naming ``source``, the key and the agent; all of the
    problems found in one call are raised together.
    """

    def __init__(
        self,
        device_map: GlobalDeviceMap,
        resource: ResourceConfig | None = None,
        *,
        source: str = "<config>",
    ) -> None:
        self.device_map: dict[DeviceName, GlobalDeviceInfo] = dict(device_map)
        self.resource = resource or ResourceConfig()
        self.source = source
        self.reservation, self._reserve_errors = reserve(self.device_map, self.resource, source)
        self._free: dict[DeviceName, tuple[DeviceId, ...]] = {}

    # -- what is there to split ---------------------------------------------------------------

    def free_devices(self, name: DeviceName) -> tuple[DeviceId, ...]:
        """Device ids of one plugin left after the reservation, in natural order."""
        if (cached := self._free.get(name)) is not None:
            return cached
        info = self.device_map[name]
        reserved = set(self.reservation.cpu) if info.role is PluginRole.CORES else set()
        ordered = sorted(info.device_ids, key=natural_sort_key)
        self._free[name] = free = tuple(d for d in ordered if d not in reserved)
        return free

    def free_amounts(self, name: DeviceName) -> dict[SlotName, Decimal]:
        """Per slot, what a plugin split by amount has left after the reservation."""
        totals: dict[SlotName, Decimal] = {}
        info = self.device_map[name]
        for slot in info.device_slots.values():
            totals[slot.slot_name] = totals.get(slot.slot_name, _ZERO) + slot.amount
        if info.role is PluginRole.MEMORY:
            totals = {s: max(_ZERO, t - self.reservation.mem) for s, t in totals.items()}
        return totals

    def allocatable(self) -> dict[SlotName, Decimal]:
        """The node's capacity per slot once the reservation is off."""
        result: dict[SlotName, Decimal] = {}
        for name, info in self.device_map.items():
            if info.shared_by_amount:
                result.update(self.free_amounts(name))
                continue
            cap = partition_capacity(info, DevicePartition(self.free_devices(name)))
            for slot, amount in cap.items():
                result[slot] = result.get(slot, _ZERO) + amount
        return result

    # -- the three modes ------------------------------------------------------------------------

    def generate_shared_assignments(self, agent_ids: Sequence[AgentId]) -> ResourceAssignments:
        """Every agent sees every device left after the reservation.

        Memory is not rounded to ``memory-align-size`` here: the agents share one map of it.
        """
        self._problems().raise_any()
        parts: dict[DeviceName, Partition] = {}
        for name, info in self.device_map.items():
            if info.shared_by_amount:
                parts[name] = SlotPartition(_plain(self.free_amounts(name)), info.device_ids)
            else:
                parts[name] = DevicePartition(self.free_devices(name))
        return {agent: dict(parts) for agent in agent_ids}

    def generate_autosplit_assignments(self, agent_ids: Sequence[AgentId]) -> ResourceAssignments:
        """Devices split per slot type; amounts split evenly, rounded down to the alignment.

        Each slot type of a plugin is split fill-from-front on its own (see
        :mod:`accelkit.partition.autosplit`). With ``numa-aware-split`` each agent's devices
        come from as few NUMA nodes as the counts allow, and its cpu cores from the NUMA
        nodes of its accelerators first.
        """
        self._problems().raise_any()
        result: dict[AgentId, dict[DeviceName, Partition]] = {a: {} for a in agent_ids}
        if not agent_ids:
            return result
        numa_aware = self.resource.numa_aware_split
        # Accelerators first: with NUMA awareness, cpu cores follow them.
        names = sorted(self.device_map, key=self._is_cores)
        for name in names:
            info = self.device_map[name]
            if info.shared_by_amount:
                share = {
                    slot: self._share(slot, amount, len(agent_ids), info)
                    for slot, amount in self.free_amounts(name).items()
                }
                for agent in agent_ids:
                    result[agent][name] = SlotPartition(_plain(share), info.device_ids)
                continue
            cores = self._is_cores(name)
            preferred = self._accelerator_nodes(result) if numa_aware and cores else None
            split = split_plugin(
                info,
                self.free_devices(name),
                agent_ids,
                numa_aware=numa_aware,
                preferred=preferred,
            )
            for agent in agent_ids:
                result[agent][name] = DevicePartition(split[agent])
        return {a: {n: result[a][n] for n in self.device_map} for a in agent_ids}

    def _accelerator_nodes(
        self, assigned: Mapping[AgentId, Mapping[DeviceName, Partition]]
    ) -> dict[AgentId, list[Node]]:
        """Per agent, the NUMA nodes of its accelerators, those with the most first."""
        preferred: dict[AgentId, list[Node]] = {}
        for agent, parts in assigned.items():
            counts: dict[Node, int] = {}
            for name, part in parts.items():
                if isinstance(part, DevicePartition):
                    for node in self._nodes_of(name, part.device_ids):
                        counts[node] = counts.get(node, 0) + 1
            preferred[agent] = sorted(counts, key=lambda n: (-counts[n], node_key(n)))
        return preferred

    def _nodes_of(self, name: DeviceName, ids: Sequence[DeviceId]) -> list[Node]:
        nodes = {d.device_id: d.numa_node for d in self.device_map[name].devices}
        return [nodes.get(d) for d in ids]

    def generate_manual_assignments(self, agents: Sequence[AgentConfig]) -> ResourceAssignments:
        """Each agent gets what its ``[agents.resource]`` names, after every check passes."""
        from accelkit.partition.manual import ManualAssigner  # a manual node's only

        problems = self._problems()
        assignments = ManualAssigner(self.device_map, self.reservation, problems).assign(agents)
        problems.raise_any()
        return assignments

    # -- the whole partition ---------------------------------------------------------------------

    def _check_agents(self, agents: Sequence[AgentConfig]) -> None:
        """At least one agent, each id once (the config loader checks this for files too)."""
        if not agents:
            msg = "there are no agents to give devices to"
            raise ConfigError(msg, file=self.source, key="agents")
        ids = [a.id for a in agents]
        if duplicates := sorted({i for i in ids if ids.count(i) > 1}):
            msg = f"agent id(s) {duplicates} given more than once"
            raise ConfigError(msg, file=self.source, key="agents", agent=duplicates[0])

    def partition(
        self, agents: Sequence[AgentConfig], mode: AllocationMode | None = None
    ) -> PartitionResult:
        """Assign the devices to ``agents`` in ``mode`` (default: the configured mode).

        One agent is always SHARED, whatever the mode: it gets every device and all the
        memory except the reserved cores and ``reserved-mem`` (the reserve still comes off),
        and scales by 1. In MANUAL mode its ``[agents.resource]`` is still checked against
        the devices, so ``accelkit check`` reports its mistakes, but it is not applied; a
        warning says so. MANUAL problems are raised together as
        :class:`~accelkit.errors.ConfigErrors`.
        """
        self._check_agents(agents)
        configured = mode or self.resource.allocation_mode
        applied = AllocationMode.SHARED if len(agents) == 1 else configured
        agent_ids = [a.id for a in agents]
        warnings: list[str] = []
        unassigned: dict[DeviceName, tuple[DeviceId, ...]]
        # A lone agent without [agents.resource] has nothing to check: it is simply SHARED.
        if configured is AllocationMode.MANUAL and (len(agents) > 1 or agents[0].resource):
            from accelkit.partition.manual import ManualAssigner  # a manual node's only

            problems = self._problems()
            assigner = ManualAssigner(self.device_map, self.reservation, problems)
            manual = assigner.assign(agents)
            problems.raise_any()
            unassigned = assigner.unassigned()
        if applied is AllocationMode.MANUAL:
            assignments: ResourceAssignments = manual
            for name, ids in unassigned.items():
                if ids:
                    warnings.append(f"{name} device(s) assigned to no agent: {listing(list(ids))}")
        else:
            if applied is AllocationMode.SHARED:
                assignments = self.generate_shared_assignments(agent_ids)
            else:
                assignments = self.generate_autosplit_assignments(agent_ids)
            unassigned = {n: () for n, i in self.device_map.items() if not i.shared_by_amount}
        if applied is not AllocationMode.MANUAL and any(a.resource for a in agents):
            warnings.append(
                f"[agents.resource] is used in allocation-mode 'manual' only; "
                f"it has no effect in {applied.value!r}"
            )
        if applied is not configured:
            warnings.append(
                f"one agent: allocation-mode {configured.value!r} behaves as 'shared' "
                "(the agent gets every device that is not reserved)"
            )
        allocatable = self.allocatable()
        capacity = {a: self._capacity(parts) for a, parts in assignments.items()}
        if applied is AllocationMode.SHARED:
            scaling = {a: dict.fromkeys(allocatable, _ONE) for a in assignments}
        else:
            scaling = {a: scaling_factors(capacity[a], allocatable) for a in assignments}
        warnings.extend(self._empty_agent_warnings(capacity))
        numa = {a: self._agent_nodes(parts) for a, parts in assignments.items()}
        if applied is not AllocationMode.SHARED:
            warnings.extend(self._numa_warnings(assignments, numa))
        return PartitionResult(
            applied,
            assignments,
            self.reservation,
            allocatable,
            capacity,
            scaling,
            unassigned,
            tuple(warnings),
            numa,
            {name: info.role for name, info in self.device_map.items()},
        )

    # -- helpers ----------------------------------------------------------------------------

    def _is_cores(self, name: DeviceName) -> bool:
        return self.device_map[name].role is PluginRole.CORES

    def _problems(self) -> ProblemList:
        problems = ProblemList(self.source)
        problems.extend(self._reserve_errors)
        return problems

    def _share(
        self, slot: SlotName, amount: Decimal, agents: int, info: GlobalDeviceInfo
    ) -> Decimal:
        types = {i.slot_type for i in info.device_slots.values() if i.slot_name == slot}
        align = self.resource.memory_align_size if SlotType.BYTES in types else 1
        return (amount // agents) // align * align

    def _capacity(self, parts: Mapping[DeviceName, Partition]) -> dict[SlotName, Decimal]:
        result: dict[SlotName, Decimal] = {}
        for name, partition in parts.items():
            result.update(partition_capacity(self.device_map[name], partition))
        return result

    def _device_nodes(self, parts: Mapping[DeviceName, Partition], *, cpu: bool) -> set[int]:
        """The known NUMA nodes of an agent's cpu cores (``cpu``) or of its other devices."""
        found: set[int] = set()
        for name, part in parts.items():
            if isinstance(part, DevicePartition) and self._is_cores(name) is cpu:
                found.update(n for n in self._nodes_of(name, part.device_ids) if n is not None)
        return found

    def _agent_nodes(self, parts: Mapping[DeviceName, Partition]) -> tuple[int, ...]:
        return tuple(
            sorted(self._device_nodes(parts, cpu=True) | self._device_nodes(parts, cpu=False))
        )

    def _numa_warnings(
        self,
        assignments: ResourceAssignments,
        numa: Mapping[AgentId, tuple[int, ...]],
    ) -> list[str]:
        """Agents whose accelerators sit on other nodes than their cores and, with
        ``numa-aware-split``, agents spanning several nodes."""
        warnings = []
        for agent, parts in assignments.items():
            cores = self._device_nodes(parts, cpu=True)
            accelerators = self._device_nodes(parts, cpu=False)
            if cores and (away := accelerators - cores):
                warnings.append(
                    f"agent {agent!r}: accelerators on NUMA node(s) {_nodes(away)}, "
                    f"but its cpu cores on {_nodes(cores)}"
                )
            elif self.resource.numa_aware_split and len(numa[agent]) > 1:
                warnings.append(f"agent {agent!r} spans NUMA nodes {_nodes(numa[agent])}")
        return warnings

    def _empty_agent_warnings(
        self, capacity: Mapping[AgentId, Mapping[SlotName, Decimal]]
    ) -> list[str]:
        warnings = []
        for role, what in ((PluginRole.CORES, "cpu cores"), (PluginRole.MEMORY, "memory")):
            slot = role.bare_slot
            for agent, slots in capacity.items():
                if slot is not None and slot in slots and slots[slot] <= 0:
                    warnings.append(f"agent {agent!r} gets no {what}")
        return warnings


def _nodes(nodes: Iterable[int]) -> str:
    return ", ".join(str(n) for n in sorted(nodes))
