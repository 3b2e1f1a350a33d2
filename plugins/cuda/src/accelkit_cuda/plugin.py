"""The cuda compute plugin: NVIDIA GPUs and MIG instances through NVML."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from accelkit.errors import PluginError, PluginUnavailable
from accelkit.plugin import AbstractComputePlugin
from accelkit.types import (
    ComputeDevice,
    DeviceAllocation,
    DeviceId,
    DeviceName,
    DeviceSlotInfo,
    NodeInfo,
    SlotSpec,
    Workload,
)
from accelkit_cuda.config import AllocationMode, CUDAConfig
from accelkit_cuda.context import CUDAAgentContext
from accelkit_cuda.discovery import discover_devices, mig_profile
from accelkit_cuda.hook import CUDALifecycleHook
from accelkit_cuda.metrics import node_metrics, read_devices
from accelkit_cuda.nvml import Handle, NVMLLibrary, NVMLModule, import_nvml
from accelkit_cuda.processes import WorkloadPids, leader_process_tree
from accelkit_cuda.slots import EXCLUSIVE_SLOT_TYPES, device_slots, mig_slot_spec, whole_gpu_slot

if TYPE_CHECKING:
    from accelkit.allocmap import AbstractAllocMap
    from accelkit.metrics import MetricContext, NodeMetric

log = logging.getLogger(__name__)


class CUDAPlugin(AbstractComputePlugin):
    """NVIDIA GPUs through NVML; see :mod:`accelkit_cuda` for the config keys.

    ``nvml`` is the NVML module to use (``pynvml``, imported by :meth:`init`, when omitted);
    ``sysfs_root`` is where NUMA nodes are read when NVML does not report them;
    ``proc_root`` is where ``driver/nvidia-caps/mig-minors`` is read (MIG caps device nodes);
    ``workload_pids`` maps a workload to its processes for workload metrics.
    """

    key: ClassVar[DeviceName] = DeviceName("cuda")
    api_version: ClassVar[str] = "2.0"
    config_schema: ClassVar[type[CUDAConfig]] = CUDAConfig
    lifecycle_hook_class = CUDALifecycleHook
    agent_context_class = CUDAAgentContext
    exclusive_slot_types: ClassVar[tuple[str, ...]] = EXCLUSIVE_SLOT_TYPES

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        *,
        nvml: NVMLModule | None = None,
        sysfs_root: Path = Path("/sys"),
        proc_root: Path = Path("/proc"),
        workload_pids: WorkloadPids = leader_process_tree,
    ) -> None:
        super().__init__(config)
        self.settings = CUDAConfig.from_mapping(self.config)
        self.workload_pids = workload_pids
        self._nvml_module = nvml
        self._sysfs_root = sysfs_root
        self._proc_root = proc_root
        self._library: NVMLLibrary | None = None
        self._handles: dict[DeviceId, Handle] = {}
        #: GPUs with MIG mode on, by parent device id: not devices, but read for node metrics
        self._mig_parents: dict[DeviceId, Handle] = {}

    @property
    def library(self) -> NVMLLibrary:
        """The initialised NVML library."""
        if self._library is None:
            msg = "plugin 'cuda': NVML is not initialised (call init() first)"
            raise PluginError(msg)
        return self._library

    async def init(self) -> None:
        """Start NVML; no nvidia-ml-py, no library, no driver or no GPU is ``unavailable``."""
        library = NVMLLibrary(self._nvml_module or import_nvml())
        try:
            library.init()
        except library.error_type as exc:
            msg = f"NVML could not start: {exc}"
            raise PluginUnavailable(msg) from exc
        try:
            count = library.device_count()
        except library.error_type as exc:
            _shutdown(library)
            msg = f"NVML could not count the GPUs: {exc}"
            raise PluginUnavailable(msg) from exc
        if count == 0:
            _shutdown(library)
            msg = "NVML found no NVIDIA GPU"
            raise PluginUnavailable(msg)
        self._library = library

    async def cleanup(self) -> None:
        """Shut NVML down; safe to call more than once."""
        library, self._library = self._library, None
        self._handles = {}
        self._mig_parents = {}
        if library is not None:
            _shutdown(library)

    async def list_devices(self) -> Sequence[ComputeDevice]:
        found = discover_devices(
            self.library, self.settings.device_id, self._sysfs_root, self._proc_root
        )
        self._handles = {f.device.device_id: f.handle for f in found}
        self._mig_parents = {
            DeviceId(f.device.extra["parent_id"]): f.parent_handle
            for f in found
            if f.parent_handle is not None
        }
        return tuple(f.device for f in found)

    def handles(self, device_ids: Iterable[DeviceId]) -> dict[DeviceId, Handle]:
        """NVML handles of the given discovered devices (unknown ids are skipped)."""
        return {d: self._handles[d] for d in device_ids if d in self._handles}

    def configurable_slots(self) -> Sequence[SlotSpec]:
        """The whole-GPU slot of the configured mode, and the MIG profiles discovered."""
        profiles = {mig_profile(d) for d in self._devices or ()} - {None}
        return (
            whole_gpu_slot(self.settings),
            *(mig_slot_spec(p) for p in sorted(p for p in profiles if p is not None)),
        )

    def device_slots(self, devices: Iterable[ComputeDevice]) -> Mapping[DeviceId, DeviceSlotInfo]:
        return device_slots(devices, self.settings)

    def create_alloc_map(
        self, device_slots: Mapping[DeviceId, DeviceSlotInfo], device_mask: frozenset[DeviceId]
    ) -> AbstractAllocMap:
        """A discrete map, or a fraction map with the configured quantum for ``cuda.shares``."""
        if self.settings.allocation is not AllocationMode.FRACTIONAL:
            return super().create_alloc_map(device_slots, device_mask)
        return self.fraction_alloc_map(
            device_slots,
            device_mask,
            quantum_size=self.settings.quantum,
            allow_fragmentation=self.settings.allow_fragmentation,
        )

    def create_lifecycle_hook(
        self,
        workload: Workload,
        device_alloc: DeviceAllocation,
        devices: Mapping[DeviceId, ComputeDevice],
    ) -> CUDALifecycleHook:
        """The hook, able to cap the memory of ``cuda.shares`` grants through this plugin."""
        return CUDALifecycleHook(
            workload,
            device_alloc,
            devices=devices,
            limiter=self,
            shares_per_device=self.settings.shares_per_device,
        )

    async def limit_memory(self, device_id: DeviceId, name_space: str, limit: int | None) -> bool:
        """``nvmlDeviceSetMemoryLimits_v1`` on one device; False where the driver lacks it.

        Another NVML error (a lost GPU) is logged and reads as not applied.
        """
        handle = self._handles.get(device_id)
        if handle is None or self._library is None:
            return False
        library = self._library
        try:
            return await asyncio.to_thread(library.set_memory_limit, handle, name_space, limit)
        except library.error_type as exc:
            log.warning("cuda: memory limit of %s on %s failed: %s", name_space, device_id, exc)
            return False

    async def get_node_info(self) -> NodeInfo:
        """Driver, NVML and CUDA driver versions."""
        library = self.library
        cuda = library.cuda_driver_version()
        return NodeInfo(
            driver_version=library.driver_version(),
            runtime_version=cuda,
            facts={"nvml_version": library.nvml_version(), "cuda_driver_version": cuda},
        )

    async def gather_node_metrics(self, ctx: MetricContext) -> Sequence[NodeMetric]:
        """Utilisation, memory, power and temperature of every discovered device.

        GPUs with MIG mode on are read too: their power and temperature count in the node's.
        """
        readings = await asyncio.to_thread(read_devices, self.library, dict(self._handles))
        parents = await asyncio.to_thread(read_devices, self.library, dict(self._mig_parents))
        return node_metrics(readings, list(parents.values()))


def _shutdown(library: NVMLLibrary) -> None:
    try:
        library.shutdown()
    except library.error_type as exc:
        log.warning("cuda: nvmlShutdown failed: %s", exc)
