"""What NVML tells of a GPU's health: whether it answers, the driver's recovery action, events.

The event-set calls are made from one thread (see :mod:`accelkit_cuda.events`).
"""

from __future__ import annotations

from typing import Any

from accelkit_cuda.nvml import FI_DEV_GET_GPU_RECOVERY_ACTION, Handle, NVMLCalls


class NVMLHealth(NVMLCalls):
    """Liveness, the recovery action a GPU asks for, and the event sets that report faults."""

    def check(self, handle: Handle) -> None:
        """A live query (the memory info): raises for a GPU off the bus or otherwise lost."""
        self.module.nvmlDeviceGetMemoryInfo(handle)

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

    def create_event_set(self) -> Any:
        """``nvmlEventSetCreate``: a new, empty event set."""
        return self.module.nvmlEventSetCreate()

    def register_events(self, handle: Handle, event_types: int, event_set: Any) -> None:
        """``nvmlDeviceRegisterEvents``: report ``event_types`` of the GPU into ``event_set``."""
        self.module.nvmlDeviceRegisterEvents(handle, event_types, event_set)

    def wait_for_event(self, event_set: Any, timeout_ms: int) -> Any:
        """``nvmlEventSetWait_v2``: the next event (``device``, ``eventType``, ``eventData``,
        ``gpuInstanceId``); raises the ``TIMEOUT`` error when none comes in ``timeout_ms``."""
        return self.module.nvmlEventSetWait_v2(event_set, timeout_ms)

    def free_event_set(self, event_set: Any) -> None:
        """``nvmlEventSetFree``."""
        self.module.nvmlEventSetFree(event_set)
