"""The ``cpu`` compute plugin: one device per usable core, slot ``cpu`` (COUNT), EVENLY."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any, ClassVar

import psutil

from accelkit import (
    CgroupFS,
    MetricContext,
    NodeMetric,
    ProcessMetric,
    WorkloadLocation,
    WorkloadMetric,
)
from accelkit.health import DeviceHealth, HealthEvent, HealthState
from accelkit.plugin import AbstractComputePlugin, MaskedAgentContext, PluginRole
from accelkit.types import (
    ComputeDevice,
    DeviceId,
    DeviceName,
    DeviceSlotInfo,
    NodeInfo,
    SlotName,
    SlotSpec,
    SlotType,
    Workload,
)
from accelkit_cpu import metrics
from accelkit_cpu.config import CPUConfig
from accelkit_cpu.cpulist import format_cpu_list
from accelkit_cpu.hook import CPULifecycleHook
from accelkit_cpu.online import core_health
from accelkit_cpu.topology import Affinity, CPUTopology

log = logging.getLogger(__name__)

SLOT = SlotName("cpu")
#: what a core not yet reported is taken to be
_ASSUMED = DeviceHealth(HealthState.HEALTHY, since=0)


class CPUAgentContext(MaskedAgentContext):
    """An agent's cores, plus the CPU time of its workloads and processes.

    A workload is located by its id (see :class:`accelkit.cgroup.WorkloadLocation`); one that
    cannot be located, or is gone, has no metrics.
    """

    plugin: CPUPlugin

    async def gather_workload_metrics(
        self, ctx: MetricContext, workload: Workload
    ) -> Sequence[WorkloadMetric]:
        location = WorkloadLocation.of(workload.id)
        if location is None:
            return ()
        used = metrics.workload_cpu_msec(
            location, cgroups=self.plugin.cgroups, root=self.plugin.root, ctx=ctx
        )
        if used is None:
            return ()
        return metrics.workload_metrics(ctx, workload.id, used)

    async def gather_process_metrics(self, ctx: MetricContext, pid: int) -> Sequence[ProcessMetric]:
        return metrics.process_metrics(ctx, pid)


class CPUPlugin(AbstractComputePlugin):
    """CPU cores of the node, as the cgroup cpuset (else the affinity mask) allows.

    ``root`` and ``affinity`` replace ``/`` and ``os.sched_getaffinity(0)`` in tests.
    """

    key: ClassVar[DeviceName] = DeviceName("cpu")
    role: ClassVar[PluginRole] = PluginRole.CORES  # offers slot "cpu"; reserved-cpu comes off
    api_version: ClassVar[str] = "2.0"
    config_schema: ClassVar[type[CPUConfig]] = CPUConfig
    lifecycle_hook_class = CPULifecycleHook
    agent_context_class = CPUAgentContext

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        *,
        root: Path | str = "/",
        affinity: Affinity | None = None,
    ) -> None:
        super().__init__(config)
        self.settings = CPUConfig.from_mapping(self.config)
        self.root = Path(root)
        self._affinity = affinity
        self._topology: CPUTopology | None = None
        self._cgroups: CgroupFS | None = None
        self._cpu_ids: tuple[int, ...] | None = None
        #: what device_health() or the watch last reported
        self._told: dict[DeviceId, DeviceHealth] = {}

    @property
    def topology(self) -> CPUTopology:
        """The cores found by :meth:`init` (read on first use otherwise)."""
        if self._topology is None:
            self._topology = CPUTopology.read(self.root, self._affinity)
        return self._topology

    @property
    def cgroups(self) -> CgroupFS:
        """The cgroup hierarchies mounted on the node."""
        if self._cgroups is None:
            self._cgroups = CgroupFS.read(self.root)
        return self._cgroups

    async def init(self) -> None:
        topology = self.topology
        log.info("cpu plugin: cores %s from %s", format_cpu_list(topology.cores), topology.source)

    async def list_devices(self) -> Sequence[ComputeDevice]:
        topology = self.topology
        return tuple(
            ComputeDevice(
                device_name=self.key,
                device_id=DeviceId(str(core)),
                hw_location=f"cpu{core}",
                numa_node=topology.numa_node.get(core),
                memory_size=0,
                processing_units=1,
                model_name=topology.model_name.get(core, ""),
            )
            for core in topology.cores
        )

    async def device_health(self) -> Mapping[DeviceId, DeviceHealth]:
        """Each core's health: UNHEALTHY ("offline") while the kernel has it offline."""
        self._told = self._tell(core_health(self.root, self.topology.cores))
        return dict(self._told)

    async def watch_health(self) -> AsyncIterator[HealthEvent]:
        """Cores going offline or coming back, looked at every ``health-interval`` seconds."""
        while True:
            before = self._told
            self._told = self._tell(core_health(self.root, self.topology.cores))
            for device, health in self._told.items():
                old = before.get(device, _ASSUMED)  # a core never reported was taken as healthy
                if (old.state, old.reason) != (health.state, health.reason):
                    yield HealthEvent(device, old.state, health)
            await asyncio.sleep(float(self.settings.health_interval))

    def _tell(self, found: Mapping[DeviceId, DeviceHealth]) -> dict[DeviceId, DeviceHealth]:
        """``found``, keeping the time of a core's last report where nothing changed."""
        told = {}
        for device, health in found.items():
            old = self._told.get(device)
            same = old is not None and (old.state, old.reason) == (health.state, health.reason)
            told[device] = old if same and old is not None else health
        return told

    def configurable_slots(self) -> Sequence[SlotSpec]:
        return (SlotSpec(SLOT, SlotType.COUNT, "CPU", "Core", "CPU cores", divisible=False),)

    def device_slots(self, devices: Iterable[ComputeDevice]) -> Mapping[DeviceId, DeviceSlotInfo]:
        amount = Decimal(self.settings.overcommit_factor)
        return {
            d.device_id: DeviceSlotInfo(SlotType.COUNT, SLOT, amount, d.numa_node) for d in devices
        }

    async def get_node_info(self) -> NodeInfo:
        topology = self.topology
        models = sorted(set(topology.model_name.values()))
        nodes = sorted(set(topology.numa_node.values()))
        return NodeInfo(
            facts={
                "cores": format_cpu_list(topology.cores),
                "cores_source": topology.source,
                "model_name": ", ".join(models),
                "numa_nodes": ",".join(map(str, nodes)),
                "overcommit_factor": str(self.settings.overcommit_factor),
            }
        )

    async def gather_node_metrics(self, ctx: MetricContext) -> Sequence[NodeMetric]:
        per_cpu = psutil.cpu_times(percpu=True)
        if self._cpu_ids is None or len(self._cpu_ids) != len(per_cpu):
            self._cpu_ids = metrics.online_cpus(self.root, len(per_cpu))
        return metrics.node_metrics(ctx, per_cpu, self._cpu_ids, self.topology.cores)
