"""Node-wide workload events that observing plugins receive."""

from __future__ import annotations

import enum

import attrs

from accelkit.types import AgentId, DeviceAllocation, DeviceName, Workload

__all__ = ["WorkloadEvent", "WorkloadPhase"]


class WorkloadPhase(enum.StrEnum):
    """The lifecycle step an event reports."""

    PRE_CREATE = "pre_create"
    POST_CREATE = "post_create"
    PRE_TERMINATE = "pre_terminate"
    POST_TERMINATE = "post_terminate"


@attrs.frozen
class WorkloadEvent:
    """A workload's lifecycle step, with the devices it holds per plugin."""

    agent_id: AgentId
    workload: Workload
    phase: WorkloadPhase = attrs.field(converter=WorkloadPhase)
    allocation: dict[DeviceName, DeviceAllocation] = attrs.field(factory=dict)
