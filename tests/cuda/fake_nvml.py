"""A stand-in for the ``pynvml`` module: the functions and constants accelkit-cuda calls.

Devices are plain objects that double as NVML handles. Every per-device function first
checks the device's ``errors`` (function name, or ``"*"`` for all, to an NVML return code),
so a test can make any single call fail, or lose a whole GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999
NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1
NVML_TEMPERATURE_GPU = 0

_MESSAGES = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}

GIB = 1024**3
MIB = 1024**2


class NVMLError(Exception):
    """Like ``pynvml.NVMLError``: carries the NVML return code in ``value``."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _MESSAGES.get(self.value, f"NVML Error with code {self.value}")


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
class FakeGpu:
    """A GPU; ``numa_node=None`` makes nvmlDeviceGetNumaNodeId unsupported."""

    index: int
    uuid: str = ""
    name: str = "NVIDIA A100-SXM4-80GB"
    memory_total: int = 80 * GIB
    memory_used: int = 0
    bus_id: str = ""
    numa_node: int | None = None
    minor: int | None = None
    sm_count: int | None = 108
    cores: int | None = 6912
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

    def __post_init__(self) -> None:
        self.uuid = self.uuid or f"GPU-{self.index:08d}-0000-0000-0000-000000000000"
        self.bus_id = self.bus_id or f"00000000:{0x10 + self.index:02X}:00.0"
        self.minor = self.index if self.minor is None else self.minor


class FakeNVML:
    """A module-like object with the NVML surface accelkit-cuda uses."""

    NVMLError = NVMLError
    NVML_DEVICE_MIG_ENABLE = NVML_DEVICE_MIG_ENABLE
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU

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
    ) -> None:
        self.gpus = list(gpus or [])
        self.init_error = init_error
        self.count_error = count_error
        self.shutdown_error = shutdown_error
        self.driver_version = driver_version
        self.nvml_version = nvml_version
        self.cuda_version = cuda_version
        self.init_calls = 0
        self.shutdown_calls = 0

    # -- library ---------------------------------------------------------------------------
    @property
    def initialized(self) -> bool:
        return self.init_calls > self.shutdown_calls

    def _need_init(self) -> None:
        if not self.initialized:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)

    def _check(self, handle: FakeGpu | FakeMig, function: str) -> None:
        self._need_init()
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
        self._check(handle, "nvmlDeviceGetAttributes")
        if isinstance(handle, FakeMig):
            return SimpleNamespace(
                multiprocessorCount=handle.sm_count,
                gpuInstanceSliceCount=handle.gpu_slices,
                computeInstanceSliceCount=handle.compute_slices,
                memorySizeMB=handle.memory_mb,
            )
        if handle.sm_count is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(multiprocessorCount=handle.sm_count)

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

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeGpu | FakeMig) -> list[FakeProcess]:
        self._check(handle, "nvmlDeviceGetComputeRunningProcesses")
        return list(handle.processes)


def gpus(count: int, **overrides: object) -> list[FakeGpu]:
    """``count`` distinct GPUs with the same settings."""
    return [FakeGpu(index, **overrides) for index in range(count)]  # type: ignore[arg-type]


def mig_gpu(index: int, profiles: list[str | None], **overrides: object) -> FakeGpu:
    """A MIG-enabled GPU whose slots hold the given profiles (``None``: an unused slot)."""
    sizes = {"1g.10gb": (1, 9856, 14), "2g.20gb": (2, 19968, 28), "3g.40gb": (3, 40192, 42)}
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
                gpu_instance_id=slot + 1,
            )
        )
    return FakeGpu(index, mig_supported=True, mig_enabled=True, migs=migs, **overrides)  # type: ignore[arg-type]
