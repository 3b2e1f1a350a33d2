"""The boundary to NVML: every ``pynvml`` call goes through one of the parts of
:class:`~accelkit_cuda.nvml.library.NVMLLibrary`, each about one subject.

- :mod:`.inventory`: :class:`NVMLSystem` (start, stop, driver and NVML versions),
  :class:`NVMLDevices` (the GPUs: count, handles, identity, size), :class:`NVMLMig` (the MIG
  instances of a GPU) and :class:`NVMLLinks` (NVLinks, the PCIe level between two GPUs);
- :mod:`.readings`: :class:`NVMLReadings` (memory, utilisation, power, temperature, SM clock)
  and :class:`NVMLProcesses` (compute processes, per-process memory limits);
- :mod:`.health`: :class:`NVMLHealth` (liveness, the recovery action, event sets).

The library is reached through a module object (``pynvml`` itself, or a test double with the
same functions and constants), so nothing here imports ``pynvml`` at import time. Readings come
back as plain ``int`` and ``str``; a reading the GPU or driver does not offer comes back as
``None``. That covers pynvml's ``NVMLLibraryMismatchError`` (an unversioned function whose
newest version the driver lacks), which is *not* an ``NVMLError``: process lists then fall
back to the older ``_v2`` call. This module holds NVML's numbers and :class:`NVMLCalls`, the
error handling every part shares.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, TypeVar

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

#: codes that mean "this GPU or driver does not offer that reading"
ABSENT_CODES = frozenset({ERROR_NOT_SUPPORTED, ERROR_FUNCTION_NOT_FOUND})
#: what an identity field may also answer: GeForce boards refuse the serial to non-root users
_HIDDEN = frozenset({*ABSENT_CODES, ERROR_NO_PERMISSION})
#: links NVML numbers at most (``NVML_NVLINK_MAX_LINKS``; pynvml 13 says 36)
NVLINK_MAX_LINKS = 36
FEATURE_ENABLED = 1
NVLINK_DEVICE_TYPE_GPU = 0
NVLINK_DEVICE_TYPE_SWITCH = 2


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


def sysfs_bus_id(nvml_bus_id: str) -> str:
    """NVML's ``00000000:3B:00.0`` in the form sysfs uses: ``0000:3b:00.0``.

    NVML writes a bus id with an 8- or a 4-digit domain (``busId``, ``busIdLegacy``); the
    sysfs form is the same for both, so two ids compare equal in it.
    """
    domain, sep, rest = nvml_bus_id.strip().partition(":")
    if not sep:
        return nvml_bus_id.strip().lower()
    try:
        return f"{int(domain, 16):04x}:{rest.lower()}"
    except ValueError:
        return nvml_bus_id.strip().lower()


class NVMLCalls:
    """One part of the boundary over ``module``: the error handling every part shares."""

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
            if self.error_code(exc) in ABSENT_CODES:
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
