"""A stand-in for the ``pynvml`` module that behaves like nvidia-ml-py's on what accelkit calls.

Devices are plain objects that double as NVML handles. Every per-device function first
checks the device's ``errors`` (function name, or ``"*"`` for all, to an NVML return code),
so a test can make any single call fail, or lose a whole GPU.

As in ``pynvml`` (nvidia-ml-py 13):

- ``NVMLError(code)`` builds the per-code subclass (``NVMLError_NotSupported`` …) through
  ``__new__``; errors compare by code and are unhashable (``__eq__`` without ``__hash__``);
- a driver without a versioned function (``missing=``) answers ``NVMLError_FunctionNotFound``,
  and the unversioned wrappers pynvml decorates with ``throwOnVersionMismatch``
  (``nvmlDeviceGetComputeRunningProcesses``) turn that into ``NVMLLibraryMismatchError``, which
  is *not* an ``NVMLError``;
- ``nvmlDeviceGetAttributes`` supports MIG device handles only (a whole GPU: not supported);
  whole GPUs tell their CUDA cores and compute capability instead;
- ``nvmlDeviceSetMemoryLimits_v1`` takes a ``c_nvmlSetMemoryLimits_v1_t``;
- events: ``nvmlDeviceRegisterEvents`` takes whole-GPU handles only and answers
  ``NVMLError_NotSupported`` (registering nothing) when any requested type is not among the
  GPU's ``event_types``; ``nvmlEventSetWait_v2`` blocks up to its timeout and raises
  ``NVMLError_Timeout``; tests raise events with :meth:`FakeNVML.inject_xid` and
  :meth:`FakeNVML.lose_gpu`;
- ``nvmlDeviceGetFieldValues`` fills each value's own ``nvmlReturn`` (a field the driver lacks
  is ``NVML_ERROR_NOT_SUPPORTED`` there, not a raised error); the recovery action is ``uiVal``.
"""

from __future__ import annotations

import string
import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from .fake_topology import FakeTopologyCalls, GpuTopology

NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999
NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1
NVML_TEMPERATURE_GPU = 0
NVML_DEVICE_MEMORY_LIMIT_MAX = 0xFFFFFFFFFFFFFFFF
nvmlEventTypeSingleBitEccError = 0x0000000000000001
nvmlEventTypeDoubleBitEccError = 0x0000000000000002
nvmlEventTypePState = 0x0000000000000004
nvmlEventTypeXidCriticalError = 0x0000000000000008
nvmlEventTypeClock = 0x0000000000000010
nvmlEventTypeGpuUnavailableError = 0x0000000000004000
nvmlEventTypeGpuRecoveryAction = 0x0000000000008000
NVML_GPU_INSTANCE_ID_ANY = 0xFFFFFFFF
NVML_COMPUTE_INSTANCE_ID_ANY = 0xFFFFFFFF
NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 230
NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_GPU_RECOVERY_ACTION_NONE = 0
NVML_GPU_RECOVERY_ACTION_GPU_RESET = 1
NVML_GPU_RECOVERY_ACTION_NODE_REBOOT = 2
NVML_GPU_RECOVERY_ACTION_DRAIN_P2P = 3
NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET = 4
#: what a data-center GPU of the driver 550 era supports (no recovery-action events yet)
DEFAULT_EVENT_TYPES = (
    nvmlEventTypeSingleBitEccError
    | nvmlEventTypeDoubleBitEccError
    | nvmlEventTypePState
    | nvmlEventTypeXidCriticalError
    | nvmlEventTypeClock
)

_MESSAGES = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_TIMEOUT: "Timeout",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}

GIB = 1024**3
MIB = 1024**2


class NVMLLibraryMismatchError(Exception):
    """Like pynvml's: an unversioned call the loaded library cannot serve; not an NVMLError."""


class NVMLError(Exception):  # noqa: PLW1641 - unhashable on purpose, as pynvml's
    """Like ``pynvml.NVMLError``: ``NVMLError(code)`` is an instance of the code's subclass."""

    _valClassMapping: dict[int, type[NVMLError]] = {}  # noqa: RUF012 - pynvml's own name
    value: int

    def __new__(cls, value: int) -> NVMLError:
        made = NVMLError._valClassMapping.get(value, cls) if cls is NVMLError else cls
        obj = Exception.__new__(made)
        obj.value = value
        return obj

    def __str__(self) -> str:
        return _MESSAGES.get(self.value, f"NVML Error with code {self.value}")

    def __eq__(self, other: object) -> bool:
        # pynvml's: compares codes, fails on a foreign object, and leaves errors unhashable
        return bool(self.value == other.value)  # type: ignore[attr-defined]


def _error_classes() -> dict[str, type[NVMLError]]:
    """``NVMLError_NotSupported`` and the rest, named as pynvml names them."""
    made = {}
    for name, code in list(globals().items()):
        if not name.startswith("NVML_ERROR_"):
            continue
        words = string.capwords(name.removeprefix("NVML_ERROR_"), "_").replace("_", "")

        def new(cls: type[NVMLError], *_args: Any, _code: int = code) -> NVMLError:
            return NVMLError.__new__(cls, _code)

        made[f"NVMLError_{words}"] = type(f"NVMLError_{words}", (NVMLError,), {"__new__": new})
        NVMLError._valClassMapping[code] = made[f"NVMLError_{words}"]
    return made


globals().update(_error_classes())


@dataclass
class FakeProcess:
    pid: int
    usedGpuMemory: int | None  # pynvml's field name


@dataclass(eq=False)
class FakeMig:
    """A MIG instance; ``name`` defaults to NVML's ``"<parent> MIG <profile>"``."""

    uuid: str
    profile: str = "1g.10gb"
    memory_mb: int = 9856
    gpu_slices: int = 1
    compute_slices: int = 1
    sm_count: int = 14
    gpu_instance_id: int = 9
    compute_instance_id: int = 0
    memory_used: int = 0
    processes: list[FakeProcess] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    name: str | None = None


@dataclass(eq=False)
class FakeGpu(GpuTopology):
    """A GPU; ``numa_node=None`` makes nvmlDeviceGetNumaNodeId unsupported."""

    index: int
    uuid: str = ""
    name: str = "NVIDIA A100-SXM4-80GB"
    memory_total: int = 80 * GIB
    memory_used: int = 0
    bus_id: str = ""
    numa_node: int | None = None
    minor: int | None = None
    #: SMs; a whole GPU does not tell them through nvmlDeviceGetAttributes (MIG handles only)
    sm_count: int | None = 108
    cores: int | None = 6912
    compute_capability: tuple[int, int] | None = (8, 0)
    utilization: tuple[int, int] | None = (0, 0)
    power: int | None = 60_000
    power_limit: int | None = 400_000
    temperature: int | None = 35
    mig_supported: bool = False
    mig_enabled: bool = False
    #: MIG slots by index; ``None`` is an unused slot
    migs: list[FakeMig | None] = field(default_factory=list)
    processes: list[FakeProcess] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    #: what nvmlDeviceSetMemoryLimits_v1 was given, by name space: (soft, hard)
    memory_limits: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: event types nvmlDeviceGetSupportedEventTypes reports (a bit mask)
    event_types: int = DEFAULT_EVENT_TYPES
    #: NVML_FI_DEV_GET_GPU_RECOVERY_ACTION; ``None``: a driver without the field
    recovery_action: int | None = NVML_GPU_RECOVERY_ACTION_NONE

    def __post_init__(self) -> None:
        self.uuid = self.uuid or f"GPU-{self.index:08d}-0000-0000-0000-000000000000"
        self.bus_id = self.bus_id or f"00000000:{0x10 + self.index:02X}:00.0"
        self.minor = self.index if self.minor is None else self.minor
        if self.serial == "":
            self.serial = f"16509210{self.index:05d}"


class FakeEventSet:
    """What nvmlEventSetCreate returns: registrations and the events not yet waited for."""

    def __init__(self) -> None:
        self.registered: dict[int, tuple[FakeGpu, int]] = {}
        self.pending: deque[SimpleNamespace | int] = deque()
        self.ready = threading.Condition()
        self.freed = False
        #: nvmlEventSetWait_v2 calls in progress (tests check none is left)
        self.waiting = 0

    def post(self, gpu: FakeGpu, event_type: int, item: SimpleNamespace | int) -> None:
        with self.ready:
            entry = self.registered.get(id(gpu))
            if entry is not None and entry[1] & event_type and not self.freed:
                self.pending.append(item)
                self.ready.notify_all()


class FakeNVML(FakeTopologyCalls):
    """A module-like object with the NVML surface accelkit-cuda uses.

    ``missing`` names functions the simulated driver lacks (the ``_v3`` process list on drivers
    before 510, ``nvmlDeviceSetMemoryLimits_v1`` on most): calling one raises
    ``NVMLError_FunctionNotFound``, as pynvml does when the symbol is absent.
    """

    NVMLError = NVMLError
    NVMLLibraryMismatchError = NVMLLibraryMismatchError
    NVML_DEVICE_MIG_ENABLE = NVML_DEVICE_MIG_ENABLE
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
    NVML_DEVICE_MEMORY_LIMIT_MAX = NVML_DEVICE_MEMORY_LIMIT_MAX
    nvmlEventTypeSingleBitEccError = nvmlEventTypeSingleBitEccError
    nvmlEventTypeDoubleBitEccError = nvmlEventTypeDoubleBitEccError
    nvmlEventTypePState = nvmlEventTypePState
    nvmlEventTypeXidCriticalError = nvmlEventTypeXidCriticalError
    nvmlEventTypeClock = nvmlEventTypeClock
    nvmlEventTypeGpuUnavailableError = nvmlEventTypeGpuUnavailableError
    nvmlEventTypeGpuRecoveryAction = nvmlEventTypeGpuRecoveryAction
    NVML_GPU_INSTANCE_ID_ANY = NVML_GPU_INSTANCE_ID_ANY
    NVML_COMPUTE_INSTANCE_ID_ANY = NVML_COMPUTE_INSTANCE_ID_ANY
    NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
    NVML_GPU_RECOVERY_ACTION_NONE = NVML_GPU_RECOVERY_ACTION_NONE
    NVML_GPU_RECOVERY_ACTION_GPU_RESET = NVML_GPU_RECOVERY_ACTION_GPU_RESET
    NVML_GPU_RECOVERY_ACTION_NODE_REBOOT = NVML_GPU_RECOVERY_ACTION_NODE_REBOOT
    NVML_GPU_RECOVERY_ACTION_DRAIN_P2P = NVML_GPU_RECOVERY_ACTION_DRAIN_P2P
    NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET = NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET

    def __init__(
        self,
        gpus: list[FakeGpu] | None = None,
        *,
        init_error: int | None = None,
        count_error: int | None = None,
        shutdown_error: int | None = None,
        driver_version: str = "550.54.15",
        nvml_version: str = "12.550.54.15",
        cuda_version: int = 12040,
        missing: frozenset[str] | set[str] = frozenset({"nvmlDeviceSetMemoryLimits_v1"}),
    ) -> None:
        self.gpus = list(gpus or [])
        self.init_error = init_error
        self.count_error = count_error
        self.shutdown_error = shutdown_error
        self.driver_version = driver_version
        self.nvml_version = nvml_version
        self.cuda_version = cuda_version
        self.missing = frozenset(missing)
        self.init_calls = 0
        self.shutdown_calls = 0
        self.event_sets: list[FakeEventSet] = []

    def __getattr__(self, name: str) -> Any:
        # the per-code error classes, as module attributes
        if name.startswith("NVMLError_") and name in globals():
            return globals()[name]
        raise AttributeError(name)

    def _symbol(self, name: str) -> None:
        """pynvml's _nvmlGetFunctionPointer: an absent symbol is FUNCTION_NOT_FOUND."""
        if name in self.missing:
            raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)

    # -- library ---------------------------------------------------------------------------
    @property
    def initialized(self) -> bool:
        return self.init_calls > self.shutdown_calls

    def _need_init(self) -> None:
        if not self.initialized:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)

    def _check(self, handle: FakeGpu | FakeMig, function: str) -> None:
        self._need_init()
        self._symbol(function)
        code = handle.errors.get(function, handle.errors.get("*"))
        if code is not None:
            raise NVMLError(code)

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.init_calls += 1

    def nvmlShutdown(self) -> None:
        self._need_init()
        self.shutdown_calls += 1
        if self.shutdown_error is not None:
            raise NVMLError(self.shutdown_error)

    def nvmlSystemGetDriverVersion(self) -> str:
        self._need_init()
        return self.driver_version

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._need_init()
        return self.nvml_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._need_init()
        return self.cuda_version

    # -- devices ---------------------------------------------------------------------------
    def nvmlDeviceGetCount(self) -> int:
        self._need_init()
        if self.count_error is not None:
            raise NVMLError(self.count_error)
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        self._need_init()
        if not 0 <= index < len(self.gpus):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        gpu = self.gpus[index]
        self._check(gpu, "nvmlDeviceGetHandleByIndex")
        return gpu

    def _parent(self, mig: FakeMig) -> FakeGpu:
        return next(g for g in self.gpus if mig in g.migs)

    def nvmlDeviceGetName(self, handle: FakeGpu | FakeMig) -> str:
        self._check(handle, "nvmlDeviceGetName")
        if isinstance(handle, FakeMig):
            return handle.name or f"{self._parent(handle).name} MIG {handle.profile}"
        return handle.name

    def nvmlDeviceGetUUID(self, handle: FakeGpu | FakeMig) -> str:
        self._check(handle, "nvmlDeviceGetUUID")
        return handle.uuid

    def nvmlDeviceGetMemoryInfo(self, handle: FakeGpu | FakeMig) -> SimpleNamespace:
        self._check(handle, "nvmlDeviceGetMemoryInfo")
        total = handle.memory_mb * MIB if isinstance(handle, FakeMig) else handle.memory_total
        used = handle.memory_used
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetPciInfo(self, handle: FakeGpu) -> SimpleNamespace:
        self._check(handle, "nvmlDeviceGetPciInfo")
        # pynvml returns the ctypes structure, whose char arrays read as bytes
        return SimpleNamespace(busId=handle.bus_id.encode())

    def nvmlDeviceGetNumaNodeId(self, handle: FakeGpu) -> int:
        self._check(handle, "nvmlDeviceGetNumaNodeId")
        if handle.numa_node is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return handle.numa_node

    def nvmlDeviceGetMinorNumber(self, handle: FakeGpu) -> int:
        self._check(handle, "nvmlDeviceGetMinorNumber")
        assert handle.minor is not None
        return handle.minor

    def nvmlDeviceGetNumGpuCores(self, handle: FakeGpu) -> int:
        self._check(handle, "nvmlDeviceGetNumGpuCores")
        if handle.cores is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return handle.cores

    def nvmlDeviceGetAttributes(self, handle: FakeGpu | FakeMig) -> SimpleNamespace:
        """pynvml's wrapper of ``nvmlDeviceGetAttributes_v2``: MIG device handles only."""
        self._check(handle, "nvmlDeviceGetAttributes_v2")
        if not isinstance(handle, FakeMig):
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(
            multiprocessorCount=handle.sm_count,
            gpuInstanceSliceCount=handle.gpu_slices,
            computeInstanceSliceCount=handle.compute_slices,
            memorySizeMB=handle.memory_mb,
        )

    def nvmlDeviceGetCudaComputeCapability(self, handle: FakeGpu | FakeMig) -> tuple[int, int]:
        self._check(handle, "nvmlDeviceGetCudaComputeCapability")
        gpu = self._parent(handle) if isinstance(handle, FakeMig) else handle
        if gpu.compute_capability is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return gpu.compute_capability

    # -- MIG -------------------------------------------------------------------------------
    def nvmlDeviceGetMigMode(self, handle: FakeGpu) -> list[int]:
        self._check(handle, "nvmlDeviceGetMigMode")
        if not handle.mig_supported:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        mode = NVML_DEVICE_MIG_ENABLE if handle.mig_enabled else NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: FakeGpu) -> int:
        self._check(handle, "nvmlDeviceGetMaxMigDeviceCount")
        return max(len(handle.migs), 7)

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: FakeGpu, index: int) -> FakeMig:
        self._check(handle, "nvmlDeviceGetMigDeviceHandleByIndex")
        mig = handle.migs[index] if index < len(handle.migs) else None
        if mig is None:
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return mig

    def nvmlDeviceGetGpuInstanceId(self, handle: FakeMig) -> int:
        self._check(handle, "nvmlDeviceGetGpuInstanceId")
        return handle.gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, handle: FakeMig) -> int:
        self._check(handle, "nvmlDeviceGetComputeInstanceId")
        return handle.compute_instance_id

    # -- metrics ---------------------------------------------------------------------------
    def nvmlDeviceGetUtilizationRates(self, handle: FakeGpu | FakeMig) -> SimpleNamespace:
        self._check(handle, "nvmlDeviceGetUtilizationRates")
        if isinstance(handle, FakeMig) or handle.utilization is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        gpu, memory = handle.utilization
        return SimpleNamespace(gpu=gpu, memory=memory)

    def _gpu_reading(self, handle: FakeGpu | FakeMig, function: str, value: str) -> int:
        self._check(handle, function)
        reading = None if isinstance(handle, FakeMig) else getattr(handle, value)
        if reading is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return int(reading)

    def nvmlDeviceGetPowerUsage(self, handle: FakeGpu | FakeMig) -> int:
        return self._gpu_reading(handle, "nvmlDeviceGetPowerUsage", "power")

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: FakeGpu | FakeMig) -> int:
        return self._gpu_reading(handle, "nvmlDeviceGetEnforcedPowerLimit", "power_limit")

    def nvmlDeviceGetTemperature(self, handle: FakeGpu | FakeMig, sensor: int) -> int:
        assert sensor == NVML_TEMPERATURE_GPU
        return self._gpu_reading(handle, "nvmlDeviceGetTemperature", "temperature")

    def nvmlDeviceGetComputeRunningProcesses_v3(
        self, handle: FakeGpu | FakeMig
    ) -> list[FakeProcess]:
        self._check(handle, "nvmlDeviceGetComputeRunningProcesses_v3")
        return list(handle.processes)

    def nvmlDeviceGetComputeRunningProcesses_v2(
        self, handle: FakeGpu | FakeMig
    ) -> list[FakeProcess]:
        self._check(handle, "nvmlDeviceGetComputeRunningProcesses_v2")
        return list(handle.processes)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeGpu | FakeMig) -> list[FakeProcess]:
        """pynvml's unversioned wrapper of ``_v3``, under ``throwOnVersionMismatch``."""
        try:
            return self.nvmlDeviceGetComputeRunningProcesses_v3(handle)
        except NVMLError_FunctionNotFound:  # type: ignore[name-defined]  # noqa: F821
            msg = (
                "Unversioned function called and the pyNVML version does not match the NVML "
                "lib version. Either use matching pyNVML and NVML lib versions or use a "
                "versioned function such as nvmlDeviceGetComputeRunningProcesses_v2"
            )
            raise NVMLLibraryMismatchError(msg) from None

    # -- memory limits ---------------------------------------------------------------------
    @staticmethod
    def c_nvmlSetMemoryLimits_v1_t(
        nameSpace: bytes, softLimit: int, hardLimit: int
    ) -> SimpleNamespace:
        return SimpleNamespace(nameSpace=nameSpace, softLimit=softLimit, hardLimit=hardLimit)

    def nvmlDeviceSetMemoryLimits_v1(self, handle: FakeGpu | FakeMig, limits: Any) -> None:
        self._check(handle, "nvmlDeviceSetMemoryLimits_v1")
        gpu = self._parent(handle) if isinstance(handle, FakeMig) else handle
        name = limits.nameSpace.decode()
        if limits.hardLimit == NVML_DEVICE_MEMORY_LIMIT_MAX:
            gpu.memory_limits.pop(name, None)
        else:
            gpu.memory_limits[name] = (int(limits.softLimit), int(limits.hardLimit))

    # -- field values ----------------------------------------------------------------------
    def nvmlDeviceGetFieldValues(
        self, handle: FakeGpu | FakeMig, fieldIds: list[int]
    ) -> list[SimpleNamespace]:
        """Per-field results, each with its own ``nvmlReturn``, as the ctypes array pynvml gives."""
        self._check(handle, "nvmlDeviceGetFieldValues")
        values = []
        for field_id in fieldIds:
            reading = None
            if field_id == NVML_FI_DEV_GET_GPU_RECOVERY_ACTION and isinstance(handle, FakeGpu):
                reading = handle.recovery_action
            values.append(
                SimpleNamespace(
                    fieldId=field_id,
                    scopeId=0,
                    valueType=NVML_VALUE_TYPE_UNSIGNED_INT,
                    nvmlReturn=0 if reading is not None else NVML_ERROR_NOT_SUPPORTED,
                    value=SimpleNamespace(uiVal=reading or 0),
                )
            )
        return values

    # -- events ----------------------------------------------------------------------------
    def nvmlEventSetCreate(self) -> FakeEventSet:
        self._need_init()
        made = FakeEventSet()
        self.event_sets.append(made)
        return made

    def nvmlDeviceGetSupportedEventTypes(self, handle: FakeGpu | FakeMig) -> int:
        self._check(handle, "nvmlDeviceGetSupportedEventTypes")
        if isinstance(handle, FakeMig):
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return handle.event_types

    def nvmlDeviceRegisterEvents(
        self, handle: FakeGpu | FakeMig, eventTypes: int, eventSet: FakeEventSet
    ) -> None:
        """Whole GPUs only; any unsupported type registers nothing (the set stays usable)."""
        self._check(handle, "nvmlDeviceRegisterEvents")
        if eventSet.freed:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        if isinstance(handle, FakeMig) or eventTypes & ~handle.event_types:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        with eventSet.ready:
            _gpu, before = eventSet.registered.get(id(handle), (handle, 0))
            eventSet.registered[id(handle)] = (handle, before | eventTypes)

    def nvmlEventSetWait_v2(self, eventSet: FakeEventSet, timeoutms: int) -> SimpleNamespace:
        """The next event, or ``NVMLError_Timeout`` after ``timeoutms`` milliseconds."""
        self._need_init()
        if eventSet.freed:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        with eventSet.ready:
            eventSet.waiting += 1
            try:
                eventSet.ready.wait_for(lambda: bool(eventSet.pending), timeoutms / 1000)
                if not eventSet.pending:
                    raise NVMLError(NVML_ERROR_TIMEOUT)
                item = eventSet.pending.popleft()
            finally:
                eventSet.waiting -= 1
        if isinstance(item, int):
            raise NVMLError(item)
        return item

    def nvmlEventSetWait(self, eventSet: FakeEventSet, timeoutms: int) -> SimpleNamespace:
        return self.nvmlEventSetWait_v2(eventSet, timeoutms)

    def nvmlEventSetFree(self, eventSet: FakeEventSet) -> None:
        self._need_init()
        if eventSet.freed:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        with eventSet.ready:
            eventSet.freed = True

    # -- what the driver does, for tests ---------------------------------------------------
    def inject_event(
        self,
        gpu: FakeGpu,
        event_type: int,
        data: int = 0,
        *,
        gpu_instance_id: int = NVML_GPU_INSTANCE_ID_ANY,
        compute_instance_id: int = NVML_COMPUTE_INSTANCE_ID_ANY,
    ) -> None:
        """Deliver an event of ``gpu`` to every event set that registered its type."""
        event = SimpleNamespace(
            device=gpu,
            eventType=event_type,
            eventData=data,
            gpuInstanceId=gpu_instance_id,
            computeInstanceId=compute_instance_id,
        )
        for event_set in self.event_sets:
            event_set.post(gpu, event_type, event)

    def inject_xid(self, gpu: FakeGpu, xid: int, **instance: int) -> None:
        """An XID critical error on ``gpu`` (``gpu_instance_id=`` attributes it to a MIG GI)."""
        self.inject_event(gpu, nvmlEventTypeXidCriticalError, xid, **instance)

    def lose_gpu(self, gpu: FakeGpu) -> None:
        """The GPU falls off the bus: XID 79 to waiters, then every call on it is GPU_IS_LOST."""
        self.inject_xid(gpu, 79)
        gpu.errors["*"] = NVML_ERROR_GPU_IS_LOST


def gpus(count: int, **overrides: object) -> list[FakeGpu]:
    """``count`` distinct GPUs with the same settings."""
    return [FakeGpu(index, **overrides) for index in range(count)]  # type: ignore[arg-type]


#: GPU-instance ids an A100 gives each profile's instances, in placement order (nvidia-smi mig -lgi)
GI_IDS = {"3g.40gb": [1, 2], "2g.20gb": [3, 4, 5], "1g.10gb": [7, 8, 9, 10, 11, 12, 13]}


def mig_gpu(index: int, profiles: list[str | None], **overrides: object) -> FakeGpu:
    """A MIG-enabled GPU whose slots hold the given profiles (``None``: an unused slot).

    GPU-instance ids follow the A100's placements (``GI_IDS``), so slot and GPU-instance id
    differ as they do on real hardware.
    """
    sizes = {"1g.10gb": (1, 9856, 14), "2g.20gb": (2, 19968, 28), "3g.40gb": (3, 40192, 42)}
    free = {profile: list(ids) for profile, ids in GI_IDS.items()}
    migs: list[FakeMig | None] = []
    for slot, profile in enumerate(profiles):
        if profile is None:
            migs.append(None)
            continue
        slices, memory_mb, sms = sizes[profile]
        migs.append(
            FakeMig(
                uuid=f"MIG-{index:04d}{slot:04d}-0000-0000-0000-000000000000",
                profile=profile,
                memory_mb=memory_mb,
                gpu_slices=slices,
                compute_slices=slices,
                sm_count=sms,
                gpu_instance_id=free[profile].pop(0),
            )
        )
    return FakeGpu(index, mig_supported=True, mig_enabled=True, migs=migs, **overrides)  # type: ignore[arg-type]


def write_mig_minors(proc_root: Path, lines: dict[str, int]) -> Path:
    """A fake ``<proc>/driver/nvidia-caps/mig-minors`` (``gpu0/gi1/access 12`` …)."""
    path = proc_root / "driver" / "nvidia-caps" / "mig-minors"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{name} {minor}\n" for name, minor in lines.items()))
    return path
