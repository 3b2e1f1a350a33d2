"""What NVML reads of a GPU as it runs: metrics, and the compute processes on it."""

from __future__ import annotations

from typing import Any

import attrs

from accelkit_cuda.nvml import CLOCK_SM, MEMORY_LIMIT_MAX, TEMPERATURE_GPU, Handle, NVMLCalls


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


class _NoV3(Exception):
    """The driver has no ``_v3`` process list (pynvml's mismatch error): ask ``_v2``."""


class NVMLReadings(NVMLCalls):
    """A device's metrics now; a reading the device does not offer is ``None``."""

    def memory(self, handle: Handle) -> MemoryInfo:
        info = self.module.nvmlDeviceGetMemoryInfo(handle)
        return MemoryInfo(total=int(info.total), used=int(info.used))

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


class NVMLProcesses(NVMLCalls):
    """The compute processes on a device, and the memory limit of a process name space."""

    def running(self, handle: Handle) -> list[ProcessUsage]:
        """Compute processes: the ``_v3`` list, or ``_v2`` on drivers without it (before 510)."""
        try:
            found = self.optional(lambda: self._running_v3(handle))
        except _NoV3:
            found = self.optional(
                lambda: self.module.nvmlDeviceGetComputeRunningProcesses_v2(handle)
            )
        return [
            ProcessUsage(int(p.pid), None if p.usedGpuMemory is None else int(p.usedGpuMemory))
            for p in found or ()
        ]

    def _running_v3(self, handle: Handle) -> Any:
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
