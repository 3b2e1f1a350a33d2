"""Node-wide workload events that observing plugins receive.

Besides the lifecycle steps, a workload gets a ``device_unhealthy`` event when a device it
holds turns unhealthy or is cordoned (DESIGN §15): ``devices`` names those devices and
``reason`` says why; the workload keeps running and keeps its allocation.
"""

from __future__ import annotations

import enum

import attrs

from accelkit.reprs import attrs_eq, attrs_hash, attrs_repr
from accelkit.types import AgentId, DeviceAllocation, DeviceId, DeviceName, Workload

__all__ = ["WorkloadEvent", "WorkloadPhase"]


class WorkloadPhase(enum.StrEnum):
    """The lifecycle step an event reports."""

    PRE_CREATE = "pre_create"
    POST_CREATE = "post_create"
    PRE_TERMINATE = "pre_terminate"
    POST_TERMINATE = "post_terminate"
    #: not a lifecycle step: a device the workload holds turned unhealthy (or was cordoned)
    DEVICE_UNHEALTHY = "device_unhealthy"


@attrs.frozen(repr=False)
class WorkloadEvent:
    """A workload's lifecycle step (or health news), with the devices it holds per plugin.

    For ``device_unhealthy``, ``devices`` names the devices that turned unhealthy and
    ``reason`` says why; both are empty for lifecycle steps.
    """

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    agent_id: AgentId
    workload: Workload
    phase: WorkloadPhase = attrs.field(converter=WorkloadPhase)
    allocation: dict[DeviceName, DeviceAllocation] = attrs.field(factory=dict)
    devices: dict[DeviceName, tuple[DeviceId, ...]] = attrs.field(factory=dict)
    reason: str = ""
