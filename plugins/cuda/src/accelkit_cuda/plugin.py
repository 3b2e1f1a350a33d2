"""The cuda compute plugin: NVIDIA GPUs and MIG instances through NVML."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from accelkit import PluginError, PluginUnavailable
from accelkit.health import DeviceHealth, HealthEvent, HealthState
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
from accelkit_cuda.discovery import FoundDevice, discover_devices, mig_profile
from accelkit_cuda.events import EventThread, GPUEvent
from accelkit_cuda.health import GPU, HealthKeeper
from accelkit_cuda.hook import CUDALifecycleHook
from accelkit_cuda.hook import device_nodes as gpu_device_nodes
from accelkit_cuda.metrics import node_metrics, read_devices
from accelkit_cuda.mps import MPS
from accelkit_cuda.nvml import Handle, NVMLModule, import_nvml
from accelkit_cuda.nvml.inventory import NVMLLinks, NVMLSystem
from accelkit_cuda.nvml.library import NVMLLibrary
from accelkit_cuda.nvml.readings import NVMLProcesses
from accelkit_cuda.placement import TopologyAllocMap
from accelkit_cuda.processes import WorkloadPids, leader_process_tree
from accelkit_cuda.shares import mps_metrics, mps_of, with_enforcement
from accelkit_cuda.slots import (
    DEVICE_SLOT,
    EXCLUSIVE_SLOT_TYPES,
    device_slots,
    mig_slot_spec,
    whole_gpu_slot,
)
from accelkit_cuda.topology import GPUPlace, Topology, read_topology

if TYPE_CHECKING:
    from accelkit import AbstractAllocMap, MetricContext, NodeMetric

log = logging.getLogger(__name__)
#: what a device not yet reported is taken to be
_ASSUMED = DeviceHealth(HealthState.HEALTHY, since=0)


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
        #: the physical GPUs behind the devices, by GPU device id (health is read per GPU)
        self._gpus: dict[str, GPU] = {}
        self._health = HealthKeeper()
        #: how the whole GPUs are joined (NVLink, PCIe), where NVML tells it
        self.topology: Topology | None = None
        #: the node's MPS daemons, where shares are enforced through MPS (set by init())
        self.mps: MPS | None = None
        #: what device_health() or the watch last reported
        self._told: dict[DeviceId, DeviceHealth] = {}

    @property
    def library(self) -> NVMLLibrary:
        """The initialised NVML library."""
        if self._library is None:
            msg = "plugin 'cuda': NVML is not initialised (call init() first)"
            raise PluginError(msg)
        return self._library

    @property
    def nvml_processes(self) -> NVMLProcesses:
        """The process calls of the initialised NVML library (for the agent contexts)."""
        return self.library.processes

    async def init(self) -> None:
        """Start NVML; no nvidia-ml-py, no library, no driver or no GPU is ``unavailable``."""
        library = NVMLLibrary.over(self._nvml_module or import_nvml())
        system = library.system
        try:
            system.init()
        except system.error_type as exc:
            msg = f"NVML could not start: {exc}"
            raise PluginUnavailable(msg) from exc
        try:
            count = library.devices.count()
        except system.error_type as exc:
            _shutdown(system)
            msg = f"NVML could not count the GPUs: {exc}"
            raise PluginUnavailable(msg) from exc
        if count == 0:
            _shutdown(system)
            msg = "NVML found no NVIDIA GPU"
            raise PluginUnavailable(msg)
        self._library = library
        self.mps = mps_of(self.settings)

    async def cleanup(self) -> None:
        """Shut NVML down; safe to call more than once."""
        library, self._library = self._library, None
        self._handles = {}
        self._mig_parents = {}
        self._gpus = {}
        if library is not None:
            _shutdown(library.system)

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
        self._gpus = _physical_gpus(found)
        self.topology = await asyncio.to_thread(_read_topology, self.library.links, found)
        devices = tuple(f.device for f in found)
        if self.settings.allocation is AllocationMode.FRACTIONAL:
            devices = tuple(with_enforcement(d, self.mps, self.settings.shares) for d in devices)
        return devices

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

    def device_nodes(self, devices: Sequence[ComputeDevice]) -> Sequence[str]:
        """Each GPU's ``/dev/nvidia<minor>``, the control nodes and the MIG access caps: the
        nodes the hook mounts into a container given these devices."""
        return gpu_device_nodes(devices)

    def create_alloc_map(
        self, device_slots: Mapping[DeviceId, DeviceSlotInfo], device_mask: frozenset[DeviceId]
    ) -> AbstractAllocMap:
        """A discrete map, or a fraction map with the configured quantum for ``cuda.shares``.

        Whole GPUs on a node whose topology NVML tells are granted as close together as it
        allows (:mod:`accelkit_cuda.placement`): one NVLink island, else one PCIe switch, else
        one NUMA node.
        """
        if self.settings.allocation is not AllocationMode.FRACTIONAL:
            topology = self.topology
            whole = any(i.slot_name == DEVICE_SLOT for i in device_slots.values())
            if topology is None or not whole:
                return super().create_alloc_map(device_slots, device_mask)
            return TopologyAllocMap(
                device_slots,
                topology=topology,
                device_mask=device_mask,
                exclusive_slot_types=self.exclusive_slot_types,
                strategy=self.allocation_strategy(),
                slot_specs=tuple(self.configurable_slots()),
            )
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
            mps=self.mps,
            shares=self.settings.shares,
        )

    async def limit_memory(self, device_id: DeviceId, name_space: str, limit: int | None) -> bool:
        """``nvmlDeviceSetMemoryLimits_v1`` on one device; False where the driver lacks it.

        Another NVML error (a lost GPU) is logged and reads as not applied.
        """
        handle = self._handles.get(device_id)
        if handle is None or self._library is None:
            return False
        processes = self._library.processes
        try:
            return await asyncio.to_thread(processes.set_memory_limit, handle, name_space, limit)
        except processes.error_type as exc:
            log.warning("cuda: memory limit of %s on %s failed: %s", name_space, device_id, exc)
            return False

    async def get_node_info(self) -> NodeInfo:
        """Driver, NVML and CUDA driver versions, and the GPU topology where NVML tells it."""
        system = self.library.system
        cuda = system.cuda_driver_version()
        facts = {"nvml_version": system.nvml_version(), "cuda_driver_version": cuda}
        if self.topology is not None:
            facts["topology"] = self.topology.describe()
        return NodeInfo(driver_version=system.driver_version(), runtime_version=cuda, facts=facts)

    async def gather_node_metrics(self, ctx: MetricContext) -> Sequence[NodeMetric]:
        """Utilisation, memory, power, temperature and SM clock of every discovered device.

        GPUs with MIG mode on are read too: their power and temperature are reported per GPU
        and count in the node's.
        """
        nvml = self.library.readings
        readings = await asyncio.to_thread(read_devices, nvml, dict(self._handles))
        parents = await asyncio.to_thread(read_devices, nvml, dict(self._mig_parents))
        found = node_metrics(readings, parents)
        if self.mps is not None:
            found += await asyncio.to_thread(mps_metrics, self.mps, self.devices)
        return found

    async def device_health(self) -> Mapping[DeviceId, DeviceHealth]:
        """Each device's health from NVML now (see :mod:`accelkit_cuda.health`)."""
        self._told = self._tell(await asyncio.to_thread(self._read_health))
        return dict(self._told)

    async def watch_health(self) -> AsyncIterator[HealthEvent]:
        """XID, ECC and recovery-action events as NVML delivers them, and a reading every
        ``health-interval``; the event thread ends and frees its event set when this ends.

        When the devices are listed again (rediscovery, a MIG reconfiguration), the thread is
        replaced by one watching the GPUs found then.
        """
        queue: asyncio.Queue[GPUEvent | None] = asyncio.Queue()
        interval = float(self.settings.health_interval)
        gpus: dict[str, GPU] | None = None
        events: EventThread | None = None
        try:
            while True:
                if gpus is not self._gpus:
                    if events is not None:
                        await events.stop()
                    gpus = self._gpus
                    handles = {key: gpu.handle for key, gpu in gpus.items()}
                    events = EventThread(self.library.health, handles, queue)
                    events.start()
                try:
                    event = await asyncio.wait_for(queue.get(), interval)
                except TimeoutError:
                    event = None
                if event is not None and (gpu := gpus.get(event.gpu)) is not None:
                    self._health.note(gpu, event.event_type, event.data, event.gpu_instance)
                before = self._told
                self._told = self._tell(await asyncio.to_thread(self._read_health))
                for device, health in self._told.items():
                    # a device never reported was taken as healthy (the contract's default)
                    old = before.get(device, _ASSUMED)
                    if (old.state, old.reason) != (health.state, health.reason):
                        yield HealthEvent(device, old.state, health)
        finally:
            if events is not None:
                await events.stop()

    def _read_health(self) -> dict[DeviceId, DeviceHealth]:
        return self._health.read(self.library.health, self._gpus.values())

    def _tell(self, found: Mapping[DeviceId, DeviceHealth]) -> dict[DeviceId, DeviceHealth]:
        """``found``, keeping the time of a device's last report where nothing changed."""
        told = {}
        for device, health in found.items():
            old = self._told.get(device)
            same = old is not None and (old.state, old.reason) == (health.state, health.reason)
            told[device] = old if same and old is not None else health
        return told


def _physical_gpus(found: Sequence[FoundDevice]) -> dict[str, GPU]:
    """The GPUs behind the found devices: a whole GPU backs itself, a MIG GPU its instances."""
    gpus: dict[str, GPU] = {}
    for f in found:
        device = f.device
        parent = device.extra.get("parent_id")
        if parent is None:
            gpus[device.device_id] = GPU(f.handle, (device.device_id,))
            continue
        known = gpus.get(parent) or GPU(f.parent_handle, ())
        instances = dict(known.instances)
        instances[int(device.extra["gpu_instance_id"])] = device.device_id
        gpus[parent] = GPU(known.handle, (*known.devices, device.device_id), instances)
    return gpus


def _read_topology(links: NVMLLinks, found: Sequence[FoundDevice]) -> Topology | None:
    """The topology of the whole GPUs found (MIG instances are granted one at a time)."""
    places = [
        GPUPlace(f.device.device_id, f.handle, f.device.extra["pci_bus_id"], f.device.numa_node)
        for f in found
        if f.parent_handle is None
    ]
    return read_topology(links, places)


def _shutdown(system: NVMLSystem) -> None:
    try:
        system.shutdown()
    except system.error_type as exc:
        log.warning("cuda: nvmlShutdown failed: %s", exc)
