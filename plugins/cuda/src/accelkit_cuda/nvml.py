"""The boundary to NVML: every ``pynvml`` call goes through :class:`NVMLLibrary`.

The library is reached through a module object (``pynvml`` itself, or a test double with the
same functions and constants), so nothing here imports ``pynvml`` at import time. Readings come
back as plain ``int`` and ``str``; a reading the GPU or driver does not offer comes back as
``None``. That covers pynvml's ``NVMLLibraryMismatchError`` (an unversioned function whose
newest version the driver lacks), which is *not* an ``NVMLError``: process lists then fall
back to the older ``_v2`` call.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

import attrs

from accelkit import PluginUnavailable

#: the ``pynvml`` module or a double of it; NVML has no type stubs, hence ``Any``
NVMLModule = Any
#: an opaque NVML device handle (a GPU or a MIG instance)
Handle = Any

T = TypeVar("T")

# NVML return codes (nvml.h); stable across driver releases
ERROR_NOT_SUPPORTED = 3
ERROR_NO_PERMISSION = 4
ERROR_NOT_FOUND = 6
ERROR_INVALID_ARGUMENT = 2
ERROR_FUNCTION_NOT_FOUND = 13
ERROR_GPU_IS_LOST = 15
ERROR_TIMEOUT = 10
ERROR_UNKNOWN = 999
MIG_ENABLE = 1
#: nvmlDeviceGetFieldValues' field of the action the driver asks for to recover the GPU
FI_DEV_GET_GPU_RECOVERY_ACTION = 230
#: event bits (nvml.h ``nvmlEventType*``)
EVENT_DOUBLE_BIT_ECC = 0x2
EVENT_XID_CRITICAL = 0x8
EVENT_GPU_UNAVAILABLE = 0x4000
EVENT_GPU_RECOVERY_ACTION = 0x8000
#: an event's ``gpuInstanceId`` when it concerns the whole GPU
GPU_INSTANCE_ANY = 0xFFFFFFFF
TEMPERATURE_GPU = 0
#: nvmlClockType_t NVML_CLOCK_SM
CLOCK_SM = 1
#: nvmlDeviceSetMemoryLimits_v1's "no limit"
MEMORY_LIMIT_MAX = 0xFFFFFFFFFFFFFFFF

#: CUDA cores per streaming multiprocessor by compute capability (major, or (major, minor)),
#: from NVIDIA's CUDA programming guide; GP100 and GA100 have half the cores of their siblings
CORES_PER_SM: dict[tuple[int, ...], int] = {
    (3,): 192,
    (5,): 128,
    (6, 0): 64,
    (6,): 128,
    (7,): 64,
    (8, 0): 64,
    (8,): 128,
    (9,): 128,
    (10,): 128,
    (12,): 128,
}

#: codes that mean "this GPU or driver does not offer that reading"
_ABSENT = frozenset({ERROR_NOT_SUPPORTED, ERROR_FUNCTION_NOT_FOUND})
#: what an identity field may also answer: GeForce boards refuse the serial to non-root users
_HIDDEN = frozenset({*_ABSENT, ERROR_NO_PERMISSION})
#: links NVML numbers at most (``NVML_NVLINK_MAX_LINKS``; pynvml 13 says 36)
NVLINK_MAX_LINKS = 36
FEATURE_ENABLED = 1
NVLINK_DEVICE_TYPE_GPU = 0
NVLINK_DEVICE_TYPE_SWITCH = 2


class _NoV3(Exception):
    """The driver has no ``_v3`` process list (pynvml's mismatch error): ask ``_v2``."""


def import_nvml() -> NVMLModule:
    """Import ``pynvml``; raise :class:`PluginUnavailable` when nvidia-ml-py is not installed."""
    try:
        return importlib.import_module("pynvml")
    except ImportError as exc:
        msg = f"nvidia-ml-py is not installed (cannot import pynvml: {exc})"
        raise PluginUnavailable(msg) from exc


def text(value: str | bytes) -> str:
    """NVML strings arrive as ``str`` or, from ctypes structures, as ``bytes``."""
    return value.decode() if isinstance(value, bytes) else str(value)


@attrs.frozen
class MemoryInfo:
    """Framebuffer memory of a GPU or MIG instance, in bytes."""

    total: int
    used: int


@attrs.frozen
class ProcessUsage:
    """One compute process on a device; ``used_memory`` is ``None`` when NVML cannot tell."""

    pid: int
    used_memory: int | None


class NVMLLibrary:
    """Typed access to the NVML functions the plugin uses."""

    def __init__(self, module: NVMLModule) -> None:
        self.module = module

    @property
    def error_type(self) -> type[Exception]:
        """The module's ``NVMLError`` base class."""
        error: type[Exception] = self.module.NVMLError
        return error

    @property
    def absent_types(self) -> tuple[type[Exception], ...]:
        """Exceptions that mean "the driver has no such function": pynvml's mismatch error."""
        mismatch = getattr(self.module, "NVMLLibraryMismatchError", None)
        return (AttributeError, *([mismatch] if isinstance(mismatch, type) else []))

    def error_code(self, exc: BaseException) -> int | None:
        """The NVML return code carried by ``exc``, or ``None`` for a foreign exception."""
        if not isinstance(exc, self.error_type):
            return None
        value = getattr(exc, "value", None)
        return value if isinstance(value, int) else None

    def optional(self, read: Callable[[], T]) -> T | None:
        """Run ``read``; a reading the device or driver does not offer gives ``None``."""
        try:
            return read()
        except self.absent_types:  # an older nvidia-ml-py or driver without the function
            return None
        except self.error_type as exc:
            if self.error_code(exc) in _ABSENT:
                return None
            raise

    def identity(self, read: Callable[[], str | bytes]) -> str | None:
        """An identity string (serial, part number, VBIOS); ``None`` where the board or driver
        does not tell it (not supported, no permission, no such function) or tells it empty."""
        try:
            value = text(read()).strip()
        except self.absent_types:
            return None
        except self.error_type as exc:
            if self.error_code(exc) in _HIDDEN:
                return None
            raise
        return value or None

    def serial(self, handle: Handle) -> str | None:
        return self.identity(lambda: self.module.nvmlDeviceGetSerial(handle))

    def board_part_number(self, handle: Handle) -> str | None:
        return self.identity(lambda: self.module.nvmlDeviceGetBoardPartNumber(handle))

    def vbios_version(self, handle: Handle) -> str | None:
        return self.identity(lambda: self.module.nvmlDeviceGetVbiosVersion(handle))

    def common_ancestor(self, first: Handle, second: Handle) -> int | None:
        """``nvmlDeviceGetTopologyCommonAncestor``: the PCIe level joining two GPUs
        (``NVML_TOPOLOGY_SINGLE`` … ``NVML_TOPOLOGY_SYSTEM``); ``None`` where NVML cannot say."""
        return self.optional(
            lambda: int(self.module.nvmlDeviceGetTopologyCommonAncestor(first, second))
        )

    def nvlink_peers(self, handle: Handle) -> list[tuple[str, bool]]:
        """The PCI bus ids at the far end of each active NVLink, with whether it is an
        NVSwitch; empty for a GPU without NVLink. Links are asked in order until NVML says the
        GPU has no such link (``NOT_SUPPORTED`` or ``INVALID_ARGUMENT``)."""
        peers: list[tuple[str, bool]] = []
        last = int(getattr(self.module, "NVML_NVLINK_MAX_LINKS", NVLINK_MAX_LINKS))
        for link in range(last):
            try:
                state = int(self.module.nvmlDeviceGetNvLinkState(handle, link))
            except self.absent_types:
                break
            except self.error_type as exc:
                if self.error_code(exc) in {*_ABSENT, ERROR_INVALID_ARGUMENT}:
                    break
                raise
            if state != FEATURE_ENABLED:
                continue
            remote = text(self.module.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)
            kind = self.optional(partial(self._remote_type, handle, link))
            peers.append((remote, kind == NVLINK_DEVICE_TYPE_SWITCH))
        return peers

    def _remote_type(self, handle: Handle, link: int) -> int:
        return int(self.module.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link))

    def init(self) -> None:
        self.module.nvmlInit()

    def shutdown(self) -> None:
        self.module.nvmlShutdown()

    def device_count(self) -> int:
        return int(self.module.nvmlDeviceGetCount())

    def handle_by_index(self, index: int) -> Handle:
        return self.module.nvmlDeviceGetHandleByIndex(index)

    def name(self, handle: Handle) -> str:
        return text(self.module.nvmlDeviceGetName(handle))

    def uuid(self, handle: Handle) -> str:
        return text(self.module.nvmlDeviceGetUUID(handle))

    def memory(self, handle: Handle) -> MemoryInfo:
        info = self.module.nvmlDeviceGetMemoryInfo(handle)
        return MemoryInfo(total=int(info.total), used=int(info.used))

    def pci_bus_id(self, handle: Handle) -> str:
        return text(self.module.nvmlDeviceGetPciInfo(handle).busId)

    def numa_node(self, handle: Handle) -> int | None:
        node = self.optional(lambda: int(self.module.nvmlDeviceGetNumaNodeId(handle)))
        return None if node is None or node < 0 else node

    def minor_number(self, handle: Handle) -> int:
        return int(self.module.nvmlDeviceGetMinorNumber(handle))

    def core_count(self, handle: Handle) -> int | None:
        return self.optional(lambda: int(self.module.nvmlDeviceGetNumGpuCores(handle)))

    def compute_capability(self, handle: Handle) -> tuple[int, int] | None:
        found = self.optional(lambda: self.module.nvmlDeviceGetCudaComputeCapability(handle))
        return None if found is None else (int(found[0]), int(found[1]))

    def gpu_sm_count(self, handle: Handle) -> int | None:
        """SMs of a whole GPU: its CUDA cores over the cores per SM of its compute capability.

        ``nvmlDeviceGetAttributes`` answers for MIG handles only; ``None`` when NVML tells
        neither figure or the architecture is unknown.
        """
        cores = self.core_count(handle)
        capability = self.compute_capability(handle)
        if cores is None or capability is None:
            return None
        per_sm = CORES_PER_SM.get(capability) or CORES_PER_SM.get(capability[:1])
        if per_sm is None or cores % per_sm:
            return None
        return cores // per_sm

    def mig_enabled(self, handle: Handle) -> bool:
        modes = self.optional(lambda: self.module.nvmlDeviceGetMigMode(handle))
        return modes is not None and int(modes[0]) == MIG_ENABLE

    def mig_handles(self, handle: Handle) -> list[tuple[int, Handle]]:
        """The MIG instances of a GPU as ``(slot index, handle)``; unused slots are skipped."""
        found = []
        for index in range(int(self.module.nvmlDeviceGetMaxMigDeviceCount(handle))):
            try:
                found.append(
                    (index, self.module.nvmlDeviceGetMigDeviceHandleByIndex(handle, index))
                )
            except self.error_type as exc:
                if self.error_code(exc) not in {ERROR_NOT_FOUND, ERROR_INVALID_ARGUMENT}:
                    raise
        return found

    def mig_attributes(self, handle: Handle) -> Any:
        """``nvmlDeviceGetAttributes``: slice counts and memory of a MIG instance."""
        return self.module.nvmlDeviceGetAttributes(handle)

    def instance_ids(self, handle: Handle) -> tuple[int, int]:
        """The GPU-instance and compute-instance ids of a MIG device."""
        return (
            int(self.module.nvmlDeviceGetGpuInstanceId(handle)),
            int(self.module.nvmlDeviceGetComputeInstanceId(handle)),
        )

    def utilization(self, handle: Handle) -> tuple[int, int] | None:
        rates = self.optional(lambda: self.module.nvmlDeviceGetUtilizationRates(handle))
        return None if rates is None else (int(rates.gpu), int(rates.memory))

    def power_usage(self, handle: Handle) -> int | None:
        return self.optional(lambda: int(self.module.nvmlDeviceGetPowerUsage(handle)))

    def power_limit(self, handle: Handle) -> int | None:
        return self.optional(lambda: int(self.module.nvmlDeviceGetEnforcedPowerLimit(handle)))

    def temperature(self, handle: Handle) -> int | None:
        return self.optional(
            lambda: int(self.module.nvmlDeviceGetTemperature(handle, TEMPERATURE_GPU))
        )

    def sm_clock(self, handle: Handle) -> int | None:
        """The SM clock now, in MHz."""
        return self.optional(lambda: int(self.module.nvmlDeviceGetClockInfo(handle, CLOCK_SM)))

    def processes(self, handle: Handle) -> list[ProcessUsage]:
        """Compute processes: the ``_v3`` list, or ``_v2`` on drivers without it (before 510)."""
        try:
            found = self.optional(lambda: self._processes_v3(handle))
        except _NoV3:
            found = self.optional(
                lambda: self.module.nvmlDeviceGetComputeRunningProcesses_v2(handle)
            )
        return [
            ProcessUsage(int(p.pid), None if p.usedGpuMemory is None else int(p.usedGpuMemory))
            for p in found or ()
        ]

    def _processes_v3(self, handle: Handle) -> Any:
        try:
            return self.module.nvmlDeviceGetComputeRunningProcesses(handle)
        except self.absent_types as exc:
            raise _NoV3 from exc

    def set_memory_limit(self, handle: Handle, name_space: str, limit: int | None) -> bool:
        """``nvmlDeviceSetMemoryLimits_v1``: cap ``name_space``'s memory (``None`` lifts it).

        False where the driver or nvidia-ml-py has no such function or the device does not
        support it; other NVML errors are raised.
        """
        hard = MEMORY_LIMIT_MAX if limit is None else limit

        def call() -> bool:
            limits = self.module.c_nvmlSetMemoryLimits_v1_t(
                nameSpace=name_space.encode(), softLimit=hard, hardLimit=hard
            )
            self.module.nvmlDeviceSetMemoryLimits_v1(handle, limits)
            return True

        return self.optional(call) or False

    def recovery_action(self, handle: Handle) -> int | None:
        """``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION``; ``None`` where the driver has no such field.

        The field's own return code says whether the driver knows it; that is not an error.
        """
        values = self.optional(
            lambda: self.module.nvmlDeviceGetFieldValues(handle, [FI_DEV_GET_GPU_RECOVERY_ACTION])
        )
        if not values:
            return None
        value = values[0]
        if int(value.nvmlReturn) != 0:
            return None
        return int(value.value.uiVal)

    def supported_events(self, handle: Handle) -> int:
        """The event types the GPU can report (0 where it reports none)."""
        return self.optional(lambda: int(self.module.nvmlDeviceGetSupportedEventTypes(handle))) or 0

    def driver_version(self) -> str:
        return text(self.module.nvmlSystemGetDriverVersion())

    def nvml_version(self) -> str:
        return text(self.module.nvmlSystemGetNVMLVersion())

    def cuda_driver_version(self) -> str:
        """The CUDA version the driver supports, as ``major.minor`` (12040 → ``12.4``)."""
        version = int(self.module.nvmlSystemGetCudaDriverVersion())
        return f"{version // 1000}.{version % 1000 // 10}"
