"""The v2 plugin interfaces: node-level plugin, agent-scoped context, workload hook (DESIGN §3).

A plugin author subclasses :class:`AbstractComputePlugin` and :class:`AbstractLifecycleHook`;
:class:`MaskedAgentContext` already confines every call to the agent's devices, so a plugin
only writes what is specific to its hardware. Every plugin class declares ``api_version``, the
plugin API it was written against (:data:`PLUGIN_API_VERSION` is the one this accelkit provides).

This module is part of the stable plugin-author surface (see the stability policy): names in
``__all__`` change only with a new major plugin API version.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from accelkit.apiversion import PLUGIN_API_VERSION
from accelkit.errors import InvalidResourceArgument, PluginError
from accelkit.health import DeviceHealth, HealthEvent
from accelkit.types import (
    AgentId,
    ComputeDevice,
    DeviceAllocation,
    DeviceId,
    DeviceName,
    DeviceSlotInfo,
    NodeInfo,
    SlotName,
    SlotSpec,
    Workload,
    WorkloadConfig,
)

if TYPE_CHECKING:
    from accelkit.allocmap import AbstractAllocMap, AllocationStrategy
    from accelkit.metrics import MetricContext, NodeMetric, ProcessMetric, WorkloadMetric

__all__ = [
    "PLUGIN_API_VERSION",
    "AbstractAgentContext",
    "AbstractComputePlugin",
    "AbstractLifecycleHook",
    "AgentShare",
    "MaskedAgentContext",
    "PluginRole",
]


class PluginRole(enum.StrEnum):
    """What a plugin's devices are to the node; the core asks the role, never the key.

    At most one plugin of a node plays ``CORES`` and at most one ``MEMORY``: the cores plugin
    offers the bare slot ``cpu`` and is what ``reserved-cpu`` reserves from, the memory plugin
    offers ``mem`` and gives up ``reserved-mem``. Every other plugin is an ``ACCELERATOR``
    whose slots start with its key. Agents allocate accelerators first, then cores, then
    memory; listings show cores, memory, then the accelerators. Bridges to cluster schedulers
    and CDI specs describe accelerators only.
    """

    CORES = "cores"
    MEMORY = "memory"
    ACCELERATOR = "accelerator"

    @property
    def bare_slot(self) -> SlotName | None:
        """The slot a plugin of this role names without its key: ``cpu`` for cores, ``mem``
        for memory, none for accelerators."""
        return _BARE_SLOTS.get(self)

    @classmethod
    def of_bare_slot(cls, slot: str) -> PluginRole | None:
        """The role whose plugin alone may offer ``slot`` (``"cpu"`` → ``CORES``), or ``None``
        for a slot that is not bare (``"cuda.device"``)."""
        return next((role for role, bare in _BARE_SLOTS.items() if bare == slot), None)


_BARE_SLOTS = {PluginRole.CORES: SlotName("cpu"), PluginRole.MEMORY: SlotName("mem")}


class AgentShare(Protocol):
    """What an agent is given of one plugin: the partition types of :mod:`accelkit.partition`.

    The contract names only what contexts read, so it does not depend on how partitioning
    works; ``slots`` (optional) caps each slot's total for plugins shared by amount.
    """

    @property
    def device_mask(self) -> frozenset[DeviceId]:
        """The devices the agent may see and allocate."""
        ...


class AbstractLifecycleHook(ABC):
    """Runs around one workload's life for one plugin.

    Hooks are stateless: everything they need is rebuilt from ``(workload, device_alloc)`` (and
    the devices those ids name), so an agent may restart between any two calls.
    """

    plugin: AbstractComputePlugin | None = None
    """The plugin that made the hook, set by the agent context that asked for it: the hook's
    calls run on that plugin's worker (see :mod:`accelkit.calls`)."""

    def __init__(
        self,
        workload: Workload,
        device_alloc: DeviceAllocation,
        *,
        devices: Mapping[DeviceId, ComputeDevice] | None = None,
    ) -> None:
        self.workload = workload
        self.device_alloc = device_alloc
        self.devices: Mapping[DeviceId, ComputeDevice] = dict(devices or {})

    @property
    def allocated_device_ids(self) -> tuple[DeviceId, ...]:
        """Ids of the devices granted more than zero, in allocation order, without repeats."""
        seen: dict[DeviceId, None] = {}
        for per_device in self.device_alloc.values():
            for device_id, amount in per_device.items():
                if amount > 0:
                    seen.setdefault(device_id, None)
        return tuple(seen)

    @abstractmethod
    async def pre_create(self) -> WorkloadConfig:
        """What the workload needs from this plugin; may raise ``WorkloadCreationDenied`` or
        the retryable ``WorkloadCreationDeferred``."""

    async def post_create(self) -> None:  # noqa: B027 - optional hook, empty by default
        """Called once the workload exists."""

    async def pre_terminate(self) -> None:  # noqa: B027 - optional hook, empty by default
        """Called before the workload is stopped; cannot cancel the termination."""

    async def post_terminate(self) -> None:  # noqa: B027 - optional hook, empty by default
        """Called after the workload is gone, exactly once per successful ``pre_create``."""


class AbstractComputePlugin(ABC):
    """One kind of device on a node; one instance per node.

    A plugin sets ``key`` and ``lifecycle_hook_class`` and implements ``list_devices``,
    ``configurable_slots`` and ``device_slots``; everything else has a working default.
    ``role`` says what its devices are to the node: an accelerator unless it says otherwise
    (the cpu plugin declares :attr:`PluginRole.CORES`, the mem plugin
    :attr:`PluginRole.MEMORY`).
    """

    key: ClassVar[DeviceName]
    """The device name (``"cuda"``); every slot other than the bare ``cpu``/``mem`` of the
    cores and memory plugins starts with it."""
    role: ClassVar[PluginRole] = PluginRole.ACCELERATOR
    """What the plugin's devices are to the node (see :class:`PluginRole`). A ``CORES``
    plugin offers the slot ``cpu`` and a ``MEMORY`` plugin the slot ``mem``; the loader
    refuses a second plugin of either role, and any other plugin offering those slots."""
    api_version: ClassVar[str]
    """The plugin API the class was written against, as ``"major.minor"``. Every plugin sets
    it; the loader refuses another major version and warns about a newer minor one."""
    exclusive_slot_types: ClassVar[tuple[str, ...]] = ()
    """fnmatch patterns of slot names that cannot be requested together."""
    shared_by_amount: ClassVar[bool] = False
    """True when agents split this plugin's capacity by amount (memory), not by device."""
    config_schema: ClassVar[type[Any] | None] = None
    """The frozen attrs class of the plugin's ``[plugins.config.NAME]`` section, or ``None``.
    The loader reads the section with it before the plugin starts, so a misspelt key is a
    ``ConfigError`` naming the key in every command (see :mod:`accelkit.config.plugin_sections`)."""
    lifecycle_hook_class: ClassVar[type[AbstractLifecycleHook] | None] = None
    """The hook :meth:`create_lifecycle_hook` builds (or override that method)."""
    agent_context_class: ClassVar[type[MaskedAgentContext] | None] = None
    """The context :meth:`create_agent_context` builds; ``None`` means
    :class:`MaskedAgentContext`."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        overrides_hook = (
            cls.create_lifecycle_hook is not AbstractComputePlugin.create_lifecycle_hook
        )
        # ABCMeta computes __abstractmethods__ only after this hook runs: look for ourselves
        is_concrete = not any(
            getattr(getattr(cls, name, None), "__isabstractmethod__", False) for name in dir(cls)
        )
        if is_concrete and cls.lifecycle_hook_class is None and not overrides_hook:
            msg = (
                f"plugin class {cls.__name__} must set lifecycle_hook_class "
                "or override create_lifecycle_hook"
            )
            raise TypeError(msg)

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        self.config: Mapping[str, Any] = dict(config or {})
        self._devices: tuple[ComputeDevice, ...] | None = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} key={getattr(self, 'key', '?')!r}>"

    async def init(self) -> None:  # noqa: B027 - optional, nothing to open by default
        """Open libraries; raise ``PluginUnavailable`` when the hardware or driver is absent."""

    async def cleanup(self) -> None:  # noqa: B027 - optional, nothing to close by default
        """Close what ``init`` opened. Must be safe to call more than once."""

    @abstractmethod
    async def list_devices(self) -> Sequence[ComputeDevice]:
        """The node's devices of this kind: the global, unmasked view."""

    @abstractmethod
    def configurable_slots(self) -> Sequence[SlotSpec]:
        """Every slot type this plugin can report, with display metadata."""

    @abstractmethod
    def device_slots(self, devices: Iterable[ComputeDevice]) -> Mapping[DeviceId, DeviceSlotInfo]:
        """The capacity each device contributes (one slot per device)."""

    def device_nodes(self, devices: Sequence[ComputeDevice]) -> Sequence[str]:
        """The device nodes a workload given ``devices`` may open (``/dev/nvidia0`` and the
        control nodes every GPU needs); none by default.

        Optional: a plugin whose devices are device nodes says which, so a workload is denied
        the nodes of the node's devices it was not given (DESIGN §14). Called with all of the
        plugin's devices and with a workload's; ``devices`` is never empty.
        """
        return ()

    async def get_node_info(self) -> NodeInfo:
        """Driver and runtime versions and hardware facts."""
        return NodeInfo()

    async def gather_node_metrics(self, ctx: MetricContext) -> Sequence[NodeMetric]:
        """Node- and device-level metrics; none by default."""
        return ()

    async def device_health(self) -> Mapping[DeviceId, DeviceHealth]:
        """The health of each discovered device; by default every device is healthy.

        Report only this plugin's devices; a device left out is taken as healthy. The node
        calls this under ``call-timeout`` (at start, on every rediscovery and from ``serve``).
        """
        return {device.device_id: DeviceHealth.healthy() for device in self.devices}

    async def watch_health(self) -> AsyncIterator[HealthEvent]:
        """Health changes as they happen; by default none (the iterator ends at once).

        An override is an async generator that may wait indefinitely between events; the node
        cancels it on shutdown, so it must clean up in ``finally`` and never block the loop.
        """
        return
        yield  # pragma: no cover - makes this an async generator that yields nothing

    def create_alloc_map(
        self, device_slots: Mapping[DeviceId, DeviceSlotInfo], device_mask: frozenset[DeviceId]
    ) -> AbstractAllocMap:
        """A fresh alloc map honouring each slot's declared kind: discrete (EVENLY unless
        ``allocation_strategy()`` says otherwise), or a fraction map where a slot is declared
        divisible by a quantum other than 1."""
        from accelkit.allocmap import DiscretePropertyAllocMap

        specs = tuple(self.configurable_slots())
        quanta = {s.quantum for s in specs if s.divisible and s.quantum is not None}
        fractional = sorted(q for q in quanta if q != 1)
        if fractional:
            # one quantum per map: a second one is refused by the map, naming both
            return self.fraction_alloc_map(device_slots, device_mask, quantum_size=fractional[0])
        return DiscretePropertyAllocMap(
            device_slots,
            device_mask=device_mask,
            exclusive_slot_types=self.exclusive_slot_types,
            strategy=self.allocation_strategy(),
            slot_specs=specs,
        )

    def allocation_strategy(self) -> AllocationStrategy:
        """The strategy of this plugin's alloc maps."""
        from accelkit.allocmap import AllocationStrategy

        return AllocationStrategy.EVENLY

    def fraction_alloc_map(
        self,
        device_slots: Mapping[DeviceId, DeviceSlotInfo],
        device_mask: frozenset[DeviceId],
        *,
        quantum_size: Decimal,
        allow_fragmentation: bool = True,
    ) -> AbstractAllocMap:
        """A fraction map with this plugin's exclusive slots, strategy and slot kinds, for
        shares: the slots declared whole stay whole."""
        from accelkit.allocmap import FractionAllocMap

        return FractionAllocMap(
            device_slots,
            device_mask=device_mask,
            exclusive_slot_types=self.exclusive_slot_types,
            strategy=self.allocation_strategy(),
            quantum_size=quantum_size,
            allow_fragmentation=allow_fragmentation,
            slot_specs=self.configurable_slots(),
        )

    def create_lifecycle_hook(
        self,
        workload: Workload,
        device_alloc: DeviceAllocation,
        devices: Mapping[DeviceId, ComputeDevice],
    ) -> AbstractLifecycleHook:
        """The hook for one workload (``lifecycle_hook_class``); ``devices`` are by id."""
        hook_class = self.lifecycle_hook_class
        if hook_class is None:  # unreachable for classes checked by __init_subclass__
            msg = f"{type(self).__name__} has no lifecycle_hook_class"
            raise PluginError(msg)
        hook = hook_class(workload, device_alloc, devices=devices)
        hook.plugin = self
        return hook

    def create_agent_context(
        self, agent_id: AgentId, partition: AgentShare
    ) -> AbstractAgentContext:
        """The masked, agent-scoped view (``agent_context_class``); discover devices first."""
        context_class = self.agent_context_class or MaskedAgentContext
        return context_class(self, agent_id, partition)

    async def discover(self) -> tuple[ComputeDevice, ...]:
        """List the devices once and remember them for the agent contexts."""
        self._devices = tuple(await self.list_devices())
        return self._devices

    def remember_devices(self, devices: Iterable[ComputeDevice]) -> None:
        """Replace what :attr:`devices` returns (a live rediscovery: the devices listed again,
        plus the vanished ones a workload may still hold)."""
        self._devices = tuple(devices)

    @property
    def devices(self) -> tuple[ComputeDevice, ...]:
        """The devices found by :meth:`discover`."""
        if self._devices is None:
            msg = f"plugin {self.key!r}: devices are not discovered yet (call discover())"
            raise PluginError(msg)
        return self._devices


class AbstractAgentContext(ABC):
    """One agent's view of one plugin: sees, allocates and manages only its devices."""

    plugin: AbstractComputePlugin
    agent_id: AgentId
    partition: AgentShare
    device_mask: frozenset[DeviceId]
    devices: tuple[ComputeDevice, ...]

    @property
    @abstractmethod
    def alloc_map(self) -> AbstractAllocMap:
        """The alloc map this agent allocates from (shared among agents in SHARED mode)."""

    @abstractmethod
    def list_devices(self) -> Sequence[ComputeDevice]:
        """The agent's devices only."""

    @abstractmethod
    def available_slots(self) -> Mapping[SlotName, Decimal]:
        """Total capacity of the agent's devices per slot."""

    @abstractmethod
    def create_alloc_map(self) -> AbstractAllocMap:
        """A new alloc map over the agent's devices, with the mask enforced."""

    @abstractmethod
    def create_lifecycle_hook(
        self, workload: Workload, device_alloc: DeviceAllocation
    ) -> AbstractLifecycleHook:
        """The hook for one workload; refuses devices outside the mask."""

    @abstractmethod
    def alloc_to_devices(self, device_alloc: DeviceAllocation) -> Sequence[ComputeDevice]:
        """The devices an allocation names; refuses devices outside the mask."""

    async def gather_workload_metrics(
        self, ctx: MetricContext, workload: Workload
    ) -> Sequence[WorkloadMetric]:
        """Metrics of one workload; none by default."""
        return ()

    async def gather_process_metrics(self, ctx: MetricContext, pid: int) -> Sequence[ProcessMetric]:
        """Metrics of one process; none by default."""
        return ()

    async def close(self) -> None:  # noqa: B027 - optional, nothing to release by default
        """Release what the context holds."""


class MaskedAgentContext(AbstractAgentContext):
    """The standard agent context: confines every call to the partition's devices."""

    def __init__(
        self, plugin: AbstractComputePlugin, agent_id: AgentId, partition: AgentShare
    ) -> None:
        self.plugin = plugin
        self.agent_id = agent_id
        self.partition = partition
        known = {d.device_id: d for d in plugin.devices}
        mask = partition.device_mask
        if unknown := sorted(mask - known.keys()):
            msg = f"agent {agent_id!r}: plugin {plugin.key!r} has no device(s) {unknown}"
            raise InvalidResourceArgument(msg)
        self.device_mask = frozenset(mask)
        self.devices = tuple(d for d in plugin.devices if d.device_id in mask)
        self._alloc_map: AbstractAllocMap | None = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.plugin.key!r} agent={self.agent_id!r}>"

    @property
    def alloc_map(self) -> AbstractAllocMap:
        if self._alloc_map is None:
            self._alloc_map = self.create_alloc_map()
        return self._alloc_map

    def share_alloc_map(self, alloc_map: AbstractAllocMap) -> None:
        """Use another context's map (SHARED mode) instead of a map of its own."""
        if not self.device_mask <= alloc_map.device_mask:
            msg = f"agent {self.agent_id!r}: the shared map does not cover the agent's devices"
            raise InvalidResourceArgument(msg)
        self._alloc_map = alloc_map

    def list_devices(self) -> Sequence[ComputeDevice]:
        return self.devices

    def device_slots(self) -> dict[DeviceId, DeviceSlotInfo]:
        """The capacity of the agent's devices, capped by a :class:`SlotPartition`'s amounts."""
        slots = dict(self.plugin.device_slots(self.devices))
        caps = dict(getattr(self.partition, "slots", None) or {})
        for device_id, info in slots.items():
            if info.slot_name not in caps:
                continue
            granted = min(info.amount, caps[info.slot_name])
            caps[info.slot_name] -= granted
            slots[device_id] = DeviceSlotInfo(
                info.slot_type, info.slot_name, granted, info.numa_node
            )
        return slots

    def available_slots(self) -> Mapping[SlotName, Decimal]:
        totals: dict[SlotName, Decimal] = {}
        for info in self.device_slots().values():
            totals[info.slot_name] = totals.get(info.slot_name, Decimal(0)) + info.amount
        return totals

    def create_alloc_map(self) -> AbstractAllocMap:
        from accelkit.allocmap.kinds import refuse_divided_whole

        alloc_map = self.plugin.create_alloc_map(self.device_slots(), self.device_mask)
        refuse_divided_whole(
            self.plugin.key, self.plugin.configurable_slots(), alloc_map.divisible_slots
        )
        return alloc_map

    def _check_in_mask(self, device_alloc: DeviceAllocation) -> None:
        outside = sorted(
            {d for per_device in device_alloc.values() for d in per_device} - self.device_mask
        )
        if outside:
            msg = (
                f"agent {self.agent_id!r}: device(s) {outside} of plugin {self.plugin.key!r} "
                "are outside the agent's partition"
            )
            raise InvalidResourceArgument(msg)

    def alloc_to_devices(self, device_alloc: DeviceAllocation) -> Sequence[ComputeDevice]:
        self._check_in_mask(device_alloc)
        wanted = {
            d
            for per_device in device_alloc.values()
            for d, amount in per_device.items()
            if amount > 0
        }
        if len(wanted) * 8 >= len(self.devices):
            return tuple(d for d in self.devices if d.device_id in wanted)
        devices = self.devices  # few of many (a booking's): looked up, in the same order
        if (by_id := vars(self).get("_by_id")) is None or by_id[0] is not devices:
            by_id = self._by_id = (devices, {d.device_id: (n, d) for n, d in enumerate(devices)})
        return tuple(d for _, d in sorted(by_id[1][i] for i in wanted if i in by_id[1]))

    def create_lifecycle_hook(
        self, workload: Workload, device_alloc: DeviceAllocation
    ) -> AbstractLifecycleHook:
        devices = {d.device_id: d for d in self.alloc_to_devices(device_alloc)}
        hook = self.plugin.create_lifecycle_hook(workload, device_alloc, devices)
        hook.plugin = self.plugin  # its calls run on the plugin's worker
        return hook
