"""What ``accelkit status`` and ``accelkit release`` report: frozen values, plain JSON."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import attrs

from accelkit.types import AgentId, DeviceId, DeviceName
from accelkit.workload.record import LedgerRecord
from accelkit.workload.status_row import (
    SHARE_ENFORCEMENT_SUFFIX,
    TYPE_TEXT,
    epoch_of,
    held_amounts,
    share_enforcement,
    status_row,
)

__all__ = [
    "SHARE_ENFORCEMENT_SUFFIX",
    "ReleaseReport",
    "WorkloadStatus",
    "held_amounts",
    "share_enforcement",
    "status_of",
    "status_row",
]


@attrs.frozen
class WorkloadStatus:
    """One workload of the ledger as the operator sees it.

    ``phase`` is how far its lifecycle got (``booked``, ``pre_create``, ``post_create``,
    ``pre_terminate``, ``post_terminate``); ``liveness`` what the node can tell of it (``managed``:
    its accelkit process runs; ``running``; ``gone``; ``unknown``); ``unfinished`` the teardown
    hooks started and not done (a hook that hung or a process that was killed).
    """

    agent: AgentId
    workload_id: str
    workload_type: str
    runtime: str | None
    handle: str | None
    devices: dict[DeviceName, tuple[DeviceId, ...]]
    phase: str
    age_s: int
    liveness: str
    owner_alive: bool
    unfinished: tuple[str, ...] = ()
    #: what the workload holds of each device (the sum over its slots), exact
    amounts: dict[DeviceName, dict[DeviceId, Decimal]] = attrs.field(factory=dict)
    #: per plugin, the resource data its ``pre_create`` returned (what it says of the grant)
    data: dict[DeviceName, dict[str, str]] = attrs.field(factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The shape ``accelkit status --json`` prints (one element of its list)."""
        return {
            "agent": self.agent,
            "workload": self.workload_id,
            "type": self.workload_type,
            "runtime": self.runtime,
            "handle": self.handle,
            "devices": {plugin: list(ids) for plugin, ids in self.devices.items()},
            "amounts": {
                plugin: {device: str(amount) for device, amount in per_device.items()}
                for plugin, per_device in self.amounts.items()
            },
            "phase": self.phase,
            "age_s": self.age_s,
            "liveness": self.liveness,
            "owner_alive": self.owner_alive,
            "unfinished_teardown": list(self.unfinished),
            "resource_data": {plugin: dict(values) for plugin, values in self.data.items()},
        }


@attrs.frozen
class ReleaseReport:
    """What :meth:`accelkit.node.Node.release` did to one workload."""

    agent: AgentId
    workload_id: str
    stopped: bool
    post_terminated: tuple[DeviceName, ...] = ()
    skipped: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()

    def messages(self) -> list[str]:
        """One line per fact, for the command line."""
        lines = [
            f"released workload {self.workload_id!r} of agent {self.agent!r}"
            + (" (stopped it first)" if self.stopped else "")
        ]
        if self.post_terminated:
            lines.append("post_terminate ran for: " + ", ".join(self.post_terminated))
        lines += [f"skipped: {s}" for s in self.skipped]
        lines += [f"error: {e}" for e in self.errors]
        return lines


def status_of(
    record: LedgerRecord, liveness: str, now: float, *, owner_alive: bool | None = None
) -> WorkloadStatus:
    """What ``accelkit status`` shows of a record whose liveness is known; ``owner_alive``
    when the caller knows it already (else the owner process is looked at)."""
    if owner_alive is None:
        owner_alive = record.owner is not None and record.owner.is_running()
    created = epoch_of(record.created_at)
    age = 0 if created is None else max(0, int(now - created))
    amounts = {plugin: held_amounts(alloc) for plugin, alloc in record.allocation.items()}
    return WorkloadStatus(
        agent=record.agent_id,
        workload_id=record.workload.id,
        workload_type=TYPE_TEXT[record.workload.type],
        runtime=record.handle.runtime if record.handle is not None else None,
        handle=record.handle.ident if record.handle is not None else None,
        devices={plugin: tuple(held) for plugin, held in amounts.items()},  # sorted by id
        phase=record.phase(),
        age_s=age,
        amounts=amounts,
        liveness=liveness,
        owner_alive=owner_alive,
        unfinished=record.unfinished() if record.started else (),
        data={plugin: dict(values) for plugin, values in record.data.items()},
    )
