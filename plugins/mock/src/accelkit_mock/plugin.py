"""Mock compute plugins: one per declared kind, each playing the device name of its key."""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any, ClassVar, cast

from accelkit import AbstractAllocMap, AllocationStrategy, ConfigError
from accelkit.health import DeviceHealth, HealthEvent
from accelkit.plugin import AbstractComputePlugin, AbstractLifecycleHook, PluginRole
from accelkit.types import (
    ComputeDevice,
    DeviceAllocation,
    DeviceId,
    DeviceName,
    DeviceSlotInfo,
    Mount,
    NodeInfo,
    SlotName,
    SlotSpec,
    SlotType,
    Workload,
    WorkloadConfig,
    WorkloadType,
)
from accelkit_mock.health import HealthFile
from accelkit_mock.spec import MockConfig, MockDevice, MockKind, load_kinds

if TYPE_CHECKING:  # the metric types and readings are imported when metrics are gathered
    from accelkit import MetricContext, NodeMetric

log = logging.getLogger(__name__)

#: the kinds playing the node's cores and memory, by key (DESIGN §11); the rest are accelerators
KIND_ROLES = {"cpu": PluginRole.CORES, "mem": PluginRole.MEMORY}

#: how often the deterministic metrics change value, in seconds
METRIC_PERIOD = 10


def slot_of(kind: MockKind, device: MockDevice) -> tuple[SlotName, SlotType]:
    """The slot a device of this kind contributes to."""
    if kind.key == "cpu":
        return SlotName("cpu"), SlotType.COUNT
    if kind.key == "mem":
        return SlotName("mem"), SlotType.BYTES
    if device.mig_profile:
        return SlotName(f"{kind.key}.mig-{device.mig_profile}"), SlotType.UNIQUE
    return SlotName(f"{kind.key}.{device.slot}"), SlotType.COUNT


def slot_spec(kind: MockKind, device: MockDevice) -> SlotSpec:
    """The declaration of the slot ``device`` contributes to, with its kind."""
    name, slot_type = slot_of(kind, device)
    quantum = kind.quantum if kind.allocation == "fractional" else Decimal(1)
    return SlotSpec(
        name,
        slot_type,
        display_name=f"Mock {name}",
        description="mock device slot",
        divisible=device.divisible,
        quantum=quantum if device.divisible else None,
    )


def deterministic_percent(device_id: str, now: float) -> int:
    """A stable pseudo-reading in 0..100: a function of the device id and the time only."""
    return (zlib.crc32(device_id.encode()) + int(now // METRIC_PERIOD) * 7) % 101


def _extra(device: MockDevice) -> dict[str, str]:
    extra = {
        "mig-profile": device.mig_profile,
        "device-node": device.device_node,
        "parent_id": device.parent,  # as the cuda plugin names a MIG instance's GPU
    }
    return {k: v for k, v in extra.items() if v}


class MockLifecycleHook(AbstractLifecycleHook):
    """Exposes the allocated mock devices as ``MOCK_<KEY>_DEVICES``."""

    def __init__(
        self,
        workload: Workload,
        device_alloc: DeviceAllocation,
        *,
        devices: Mapping[DeviceId, ComputeDevice] | None = None,
        key: str,
    ) -> None:
        super().__init__(workload, device_alloc, devices=devices)
        self.key = key

    async def pre_create(self) -> WorkloadConfig:
        name = f"MOCK_{self.key.upper().replace('-', '_')}_DEVICES"
        mounts: tuple[Mount, ...] = ()
        if self.workload.type is WorkloadType.CONTAINER:  # a process tree finds them in place
            known = (self.devices.get(i) for i in self.allocated_device_ids)
            nodes = (d.extra.get("device-node", "") for d in known if d is not None)
            # devices sharing one node (a card and its partitions) mount it once
            mounts = tuple(Mount.device(path) for path in dict.fromkeys(nodes) if path)
        env = {name: ",".join(self.allocated_device_ids)}
        return WorkloadConfig(env_vars=env, mounts=mounts)


class MockPlugin(AbstractComputePlugin):
    """Devices declared in TOML; one subclass per kind, made by :meth:`for_kind`."""

    api_version: ClassVar[str] = "2.0"
    config_schema: ClassVar[type[MockConfig]] = MockConfig
    kind: ClassVar[MockKind]

    @classmethod
    def for_kind(cls, kind: MockKind, config: Mapping[str, Any]) -> MockPlugin:
        """A plugin instance playing the device name ``kind.key``."""
        exclusive = (
            ()
            if kind.key in ("cpu", "mem")
            else tuple(f"{kind.key}.{suffix}" for suffix in ("device", "shares", "mig-*"))
        )
        attributes = {
            "key": DeviceName(kind.key),
            "role": KIND_ROLES.get(kind.key, PluginRole.ACCELERATOR),
            "kind": kind,
            "exclusive_slot_types": exclusive,
            "shared_by_amount": kind.key == "mem",
        }
        name = f"Mock{kind.key.title().replace('-', '').replace('_', '')}Plugin"
        subclass = cast("type[MockPlugin]", type(name, (cls,), attributes))
        return subclass(config)

    @property
    def health_file(self) -> HealthFile:
        """The devices' health as the device file says, re-read when it changes."""
        if (found := getattr(self, "_health_file", None)) is None:
            found = self._health_file = HealthFile(self.kind, self.config)
        return found

    @property
    def health_interval(self) -> float:
        """Seconds between two looks at the device file in :meth:`watch_health`."""
        return float(Decimal(str(self.config.get("health-interval", 1))))

    async def device_health(self) -> Mapping[DeviceId, DeviceHealth]:
        """``health`` / ``health-reason`` of each device, from the device file as it is now."""
        self._told: Mapping[DeviceId, DeviceHealth] = self.health_file.current()
        return self._told

    async def watch_health(self) -> AsyncIterator[HealthEvent]:
        """An event for each device whose health in the device file changed (polled).

        Changes are counted from what :meth:`device_health` last reported, so a change made
        between that call and the start of the watch is not missed.
        """
        last = getattr(self, "_told", None) or self.health_file.current()
        while True:
            now = self.health_file.current()  # one stat while the file is unchanged
            for device, health in now.items():
                before = last.get(device)
                if before is not None and before != health:
                    yield HealthEvent(device, before.state, health)
            last = self._told = now
            await asyncio.sleep(self.health_interval)

    @property
    def declared(self) -> dict[str, MockDevice]:
        """Every device the kind has declared since start, by id (the latest declaration wins)."""
        if (found := getattr(self, "_declared", None)) is None:
            found = self._declared = {d.id: d for d in self.kind.devices}
        return found

    def _current_devices(self) -> tuple[MockDevice, ...]:
        """The kind's devices as the device file declares them now: read again on every call
        after the first, so a rediscovery sees devices added or removed; an unreadable file
        keeps the last devices."""
        if not self.config.get("config-file") or not hasattr(self, "_listed"):
            self._listed = tuple(d.id for d in self.kind.devices)
            return self.kind.devices  # just read by the loader: the first listing needs no read
        try:
            kinds = load_kinds(self.config)
        except ConfigError as exc:
            log.warning("mock %r: keeping the last devices, the device file: %s", self.key, exc)
            return tuple(self.declared[i] for i in self._listed)
        fresh = next((k.devices for k in kinds if k.key == self.key), ())
        self.declared.update({d.id: d for d in fresh})
        self._listed = tuple(d.id for d in fresh)
        self.health_file.know(self._listed)
        return fresh

    def listed_devices(self) -> tuple[MockDevice, ...]:
        """The devices of the last listing (at start: the declared ones)."""
        listed = getattr(self, "_listed", None)
        return self.kind.devices if listed is None else tuple(self.declared[i] for i in listed)

    @property
    def plays_gpus(self) -> bool:
        """Whether this kind plays the cuda plugin's metrics and GPU identity."""
        return bool(self.config.get("gpu-metrics")) and self.role is PluginRole.ACCELERATOR

    async def list_devices(self) -> Sequence[ComputeDevice]:
        current = self._current_devices()
        if self.plays_gpus:
            from accelkit_mock.metrics import gpu_extra

            gpus = gpu_extra(self.key, current)
        else:
            gpus = {}
        return [
            ComputeDevice(
                device_name=self.key,
                device_id=DeviceId(d.id),
                hw_location=f"mock:{self.key}/{d.id}",
                numa_node=d.numa_node,
                memory_size=d.memory,
                processing_units=d.processing_units,
                model_name=d.model,
                uuid=f"MOCK-{self.key}-{d.id}",
                extra=_extra(d) | gpus.get(d.id, {}),
            )
            for d in current
        ]

    def configurable_slots(self) -> Sequence[SlotSpec]:
        """The slots of the kind's declared devices (made once: the kind never changes, and
        a node's start asks three times)."""
        if (made := getattr(self, "_slot_specs", None)) is None:
            devices = self.kind.devices
            if not devices:
                fractional = self.kind.allocation == "fractional"
                slot = "shares" if fractional else "device"
                divisible = self.key == "mem" or (fractional and self.key != "cpu")
                plain = MockDevice("", "", None, 0, 0, Decimal(1), slot=slot, divisible=divisible)
                devices = (plain,)
            specs = {s.name: s for s in (slot_spec(self.kind, d) for d in devices)}
            made = self._slot_specs = tuple(specs[name] for name in sorted(specs))
        return list(made)

    def device_nodes(self, devices: Sequence[ComputeDevice]) -> Sequence[str]:
        """The ``device-node`` of each device that declares one (as the hook mounts them)."""
        return [path for d in devices if (path := d.extra.get("device-node", ""))]

    def device_slots(self, devices: Iterable[ComputeDevice]) -> Mapping[DeviceId, DeviceSlotInfo]:
        """Each device's slot as it is declared now (each declaration's made once: a node's
        start asks three times for every device)."""
        declared = self.declared
        made: dict[DeviceId, tuple[MockDevice, DeviceSlotInfo]] | None
        if (made := getattr(self, "_slot_infos", None)) is None:
            made = {}
            self._slot_infos = made
        result: dict[DeviceId, DeviceSlotInfo] = {}
        for device in devices:
            device_id = device.device_id
            spec = declared[device_id]
            known = made.get(device_id)
            if known is None or known[0] is not spec:  # first asked, or declared anew since
                name, slot_type = slot_of(self.kind, spec)
                info = DeviceSlotInfo(slot_type, name, spec.amount, spec.numa_node)
                known = made[device_id] = (spec, info)
            result[device_id] = known[1]
        return result

    def allocation_strategy(self) -> AllocationStrategy:
        return AllocationStrategy.FILL if self.key == "mem" else AllocationStrategy.EVENLY

    def create_alloc_map(
        self, device_slots: Mapping[DeviceId, DeviceSlotInfo], device_mask: frozenset[DeviceId]
    ) -> AbstractAllocMap:
        if self.kind.allocation != "fractional":
            return super().create_alloc_map(device_slots, device_mask)
        return self.fraction_alloc_map(device_slots, device_mask, quantum_size=self.kind.quantum)

    def create_lifecycle_hook(
        self,
        workload: Workload,
        device_alloc: DeviceAllocation,
        devices: Mapping[DeviceId, ComputeDevice],
    ) -> AbstractLifecycleHook:
        return MockLifecycleHook(workload, device_alloc, devices=devices, key=self.key)

    async def get_node_info(self) -> NodeInfo:
        return NodeInfo(
            driver_version="mock",
            runtime_version="mock",
            facts={"kind": self.key, "devices": str(len(self.kind.devices))},
        )

    async def gather_node_metrics(self, ctx: MetricContext) -> Sequence[NodeMetric]:
        from accelkit import Measurement, MetricType, NodeMetric
        from accelkit_mock.metrics import gpu_metrics

        now = time.time()
        devices = self.listed_devices()
        per_device = {
            DeviceId(d.id): Measurement(deterministic_percent(d.id, now), 100) for d in devices
        }
        total = sum((m.value for m in per_device.values()), Decimal(0))
        count = len(per_device)
        node = Measurement(total / count if count else 0, 100)
        metrics = [NodeMetric("utilization", MetricType.UTILIZATION, "percent", node, per_device)]
        if any(d.memory for d in devices):  # only kinds that declare memory
            memory = {
                DeviceId(d.id): Measurement(
                    d.memory * deterministic_percent(d.id, now) // 100, d.memory
                )
                for d in devices
            }
            memory_node = Measurement(
                sum((m.value for m in memory.values()), Decimal(0)),
                sum(d.memory for d in devices),
            )
            metrics.append(
                NodeMetric("memory_used", MetricType.GAUGE, "bytes", memory_node, memory)
            )
        if self.plays_gpus:
            metrics += gpu_metrics(devices, lambda device: deterministic_percent(device, now))
        return metrics
