"""GPU health as NVML tells it: lost GPUs, the driver's recovery action, and XID events.

A device is UNHEALTHY when NVML answers ``GPU_IS_LOST`` or ``UNKNOWN`` for it, when the driver's
recovery action (``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION``, drivers that have the field) is one
of :data:`RECOVERY_ACTIONS` (a newer one makes it DEGRADED), or after a critical XID or
double-bit ECC event (:data:`XID_UNHEALTHY`). An XID mark lasts until the GPU is reset: the
recovery action, having asked for something, reads NONE again. Where the driver has no such
field, the mark lasts until the plugin starts again (after the reset, the node service is
restarted). MIG devices follow their parent GPU; an XID attributed to one GPU instance marks
that instance only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

import attrs

from accelkit.health import DeviceHealth, HealthState
from accelkit.types import DeviceId
from accelkit_cuda.nvml import (
    ERROR_GPU_IS_LOST,
    ERROR_UNKNOWN,
    EVENT_DOUBLE_BIT_ECC,
    EVENT_GPU_UNAVAILABLE,
    EVENT_XID_CRITICAL,
    GPU_INSTANCE_ANY,
    Handle,
)
from accelkit_cuda.nvml.health import NVMLHealth

log = logging.getLogger(__name__)

#: XIDs after which a GPU takes no new work until it is reset (NVIDIA's XID catalogue)
XID_UNHEALTHY: Mapping[int, str] = {
    48: "double-bit ECC error",
    63: "ECC page retirement or row remapping event",
    64: "ECC page retirement or row remapping failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}
#: XIDs caused by an application (its own fault, not the GPU's): no change of health
XID_APPLICATION: Mapping[int, str] = {
    13: "graphics engine exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "preemptive cleanup",
    68: "video processor exception",
}
#: nvmlDeviceGpuRecoveryAction_t; 0 (NONE) means nothing is needed
RECOVERY_ACTIONS: Mapping[int, str] = {
    1: "GPU_RESET",
    2: "NODE_REBOOT",
    3: "DRAIN_P2P",
    4: "DRAIN_AND_RESET",
    5: "RECOVER_IMEX_DOMAIN",
    6: "BUS_RESET",
    7: "SYSTEM_REBOOT",
}
#: NVML codes of a query that mean the GPU is gone or broken
_LOST = frozenset({ERROR_GPU_IS_LOST, ERROR_UNKNOWN})


@attrs.frozen
class GPU:
    """A physical GPU: its handle and the devices it backs (itself, or its MIG instances).

    ``instances`` maps GPU-instance ids to the MIG devices, empty for a whole GPU.
    """

    handle: Handle = attrs.field(eq=False, repr=False)
    devices: tuple[DeviceId, ...]
    instances: Mapping[int, DeviceId] = attrs.field(factory=dict)


@attrs.frozen
class Mark:
    """An event that made a device unhealthy; ``reset_asked`` once the driver asked to recover."""

    health: DeviceHealth
    reset_asked: bool = False


def event_health(event_type: int, data: int) -> DeviceHealth | None:
    """The health an NVML event means, or ``None`` for an event that changes nothing."""
    if event_type & EVENT_XID_CRITICAL:
        if data in XID_UNHEALTHY:
            return DeviceHealth(HealthState.UNHEALTHY, f"XID {data}: {XID_UNHEALTHY[data]}")
        if data in XID_APPLICATION:
            log.info("cuda: application XID %d (%s)", data, XID_APPLICATION[data])
        else:
            log.warning("cuda: XID %d is not in the table of critical XIDs; health unchanged", data)
        return None
    if event_type & EVENT_DOUBLE_BIT_ECC:
        return DeviceHealth(HealthState.UNHEALTHY, "double-bit ECC error")
    if event_type & EVENT_GPU_UNAVAILABLE:
        return DeviceHealth(HealthState.UNHEALTHY, "GPU unavailable")
    return None  # a recovery-action event: the next reading tells


class HealthKeeper:
    """Marks left by events, and each device's health from them and NVML's readings."""

    def __init__(self) -> None:
        self._marks: dict[DeviceId, Mark] = {}

    def note(self, gpu: GPU, event_type: int, data: int, gpu_instance: int) -> None:
        """Mark the devices an event concerns (one MIG instance when it names one)."""
        health = event_health(event_type, data)
        if health is None:
            return
        instance = gpu.instances.get(gpu_instance) if gpu_instance != GPU_INSTANCE_ANY else None
        for device in (instance,) if instance is not None else gpu.devices:
            self._marks[device] = Mark(health)

    def read(self, library: NVMLHealth, gpus: Iterable[GPU]) -> dict[DeviceId, DeviceHealth]:
        """Every device's health now; reads NVML (call it from a worker thread)."""
        found: dict[DeviceId, DeviceHealth] = {}
        for gpu in gpus:
            found.update(self._read_gpu(library, gpu))
        return found

    def _read_gpu(self, library: NVMLHealth, gpu: GPU) -> dict[DeviceId, DeviceHealth]:
        try:
            library.check(gpu.handle)  # a live query: a GPU off the bus fails it
            action = library.recovery_action(gpu.handle)
        except library.error_type as exc:
            code = library.error_code(exc)
            state = HealthState.UNHEALTHY if code in _LOST else HealthState.UNKNOWN
            reason = f"NVML: {exc}"
            return {d: DeviceHealth(state, reason) for d in gpu.devices}
        if action is not None and action in RECOVERY_ACTIONS:
            for device in gpu.devices:
                if (mark := self._marks.get(device)) is not None:
                    self._marks[device] = attrs.evolve(mark, reset_asked=True)
            reason = f"recovery action {RECOVERY_ACTIONS[action]}"
            return {d: DeviceHealth(HealthState.UNHEALTHY, reason) for d in gpu.devices}
        if action:  # an action newer than this table: shown, but not ours to act on
            newer = DeviceHealth(HealthState.DEGRADED, f"recovery action {action}")
            return {d: self._marks[d].health if d in self._marks else newer for d in gpu.devices}
        if action is not None:  # NONE
            for device in gpu.devices:
                if (mark := self._marks.get(device)) is not None and mark.reset_asked:
                    del self._marks[device]
        return {
            d: self._marks[d].health if d in self._marks else DeviceHealth.healthy()
            for d in gpu.devices
        }
