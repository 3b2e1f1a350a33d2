"""The ``mem`` compute plugin: one device ``root``, slot ``mem`` (BYTES), FILL, split by amount."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import psutil

from accelkit import (
    CgroupFS,
    MetricContext,
    NodeMetric,
    ProcessMetric,
    WorkloadLocation,
    WorkloadMetric,
    format_binary_size,
)
from accelkit.plugin import AbstractComputePlugin, MaskedAgentContext, PluginRole
from accelkit.types import (
    ComputeDevice,
    DeviceId,
    DeviceName,
    DeviceSlotInfo,
    NodeInfo,
    SlotSpec,
    SlotType,
    Workload,
)
from accelkit_mem import metrics
from accelkit_mem.config import MemConfig
from accelkit_mem.hook import SLOT, MemLifecycleHook
from accelkit_mem.limits import Ram, UsableMemory

if TYPE_CHECKING:
    from accelkit import AllocationStrategy

log = logging.getLogger(__name__)

ROOT_DEVICE = DeviceId("root")


class MemAgentContext(MaskedAgentContext):
    """An agent's share of memory, plus the memory used by its workloads and processes.

    A workload is located by its id (see :class:`accelkit.cgroup.WorkloadLocation`); one that
    cannot be located, or is gone, has no metrics.
    """

    plugin: MemPlugin

    async def gather_workload_metrics(
        self, ctx: MetricContext, workload: Workload
    ) -> Sequence[WorkloadMetric]:
        location = WorkloadLocation.of(workload.id)
        if location is None:
            return ()
        used = metrics.workload_bytes(
            location, cgroups=self.plugin.cgroups, root=self.plugin.root, ctx=ctx
        )
        return () if used is None else metrics.workload_metrics(workload.id, used)

    async def gather_process_metrics(self, ctx: MetricContext, pid: int) -> Sequence[ProcessMetric]:
        return metrics.process_metrics(pid)


class MemPlugin(AbstractComputePlugin):
    """The node's usable memory as one device: RAM, or the cgroup limit when that is lower.

    ``root`` and ``ram`` replace ``/`` and ``psutil.virtual_memory().total`` in tests.
    """

    key: ClassVar[DeviceName] = DeviceName("mem")
    role: ClassVar[PluginRole] = PluginRole.MEMORY  # offers slot "mem"; reserved-mem comes off
    api_version: ClassVar[str] = "2.0"
    config_schema: ClassVar[type[MemConfig]] = MemConfig
    lifecycle_hook_class = MemLifecycleHook
    agent_context_class = MemAgentContext
    shared_by_amount: ClassVar[bool] = True

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        *,
        root: Path | str = "/",
        ram: Ram | None = None,
    ) -> None:
        super().__init__(config)
        self.settings = MemConfig.from_mapping(self.config)
        self.root = Path(root)
        self._ram = ram
        self._usable: UsableMemory | None = None
        self._cgroups: CgroupFS | None = None

    @property
    def usable(self) -> UsableMemory:
        """The usable memory found by :meth:`init` (read on first use otherwise)."""
        if self._usable is None:
            self._usable = UsableMemory.read(self.root, self._ram)
        return self._usable

    @property
    def cgroups(self) -> CgroupFS:
        """The cgroup hierarchies mounted on the node."""
        if self._cgroups is None:
            self._cgroups = CgroupFS.read(self.root)
        return self._cgroups

    async def init(self) -> None:
        usable = self.usable
        log.info("mem plugin: %s usable (from %s)", format_binary_size(usable.size), usable.source)

    async def list_devices(self) -> Sequence[ComputeDevice]:
        usable = self.usable
        return (
            ComputeDevice(
                device_name=self.key,
                device_id=ROOT_DEVICE,
                hw_location="root",
                numa_node=None,
                memory_size=usable.size,
                processing_units=0,
                extra={"ram": str(usable.ram), "source": usable.source},
            ),
        )

    def configurable_slots(self) -> Sequence[SlotSpec]:
        # divisible to the byte: agents and workloads get any number of bytes
        return (
            SlotSpec(
                SLOT,
                SlotType.BYTES,
                "Memory",
                "GiB",
                "Main memory",
                divisible=True,
                quantum=Decimal(1),
            ),
        )

    def device_slots(self, devices: Iterable[ComputeDevice]) -> Mapping[DeviceId, DeviceSlotInfo]:
        factor = self.settings.overcommit_factor
        return {
            d.device_id: DeviceSlotInfo(
                SlotType.BYTES, SLOT, int(d.memory_size * factor), d.numa_node
            )
            for d in devices
        }

    def allocation_strategy(self) -> AllocationStrategy:
        from accelkit import AllocationStrategy

        return AllocationStrategy.FILL

    async def get_node_info(self) -> NodeInfo:
        usable = self.usable
        return NodeInfo(
            facts={
                "ram": str(usable.ram),
                "usable": str(usable.size),
                "usable_source": usable.source,
                "overcommit_factor": str(self.settings.overcommit_factor),
            }
        )

    async def gather_node_metrics(self, ctx: MetricContext) -> Sequence[NodeMetric]:
        vm = psutil.virtual_memory()
        usable = self.usable
        device_used = vm.used
        if usable.cgroup is not None:
            device_used = metrics.cgroup_working_set(usable.cgroup) or 0
        return metrics.node_metrics(vm.used, vm.total, device_used, usable.size)
