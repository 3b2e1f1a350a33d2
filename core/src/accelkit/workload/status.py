"""What ``accelkit status`` and ``accelkit release`` report: frozen values, plain JSON."""

from __future__ import annotations

import datetime as dt
import functools
from decimal import Decimal
from typing import Any

import attrs

from accelkit.types import AgentId, DeviceAllocation, DeviceId, DeviceName, WorkloadType
from accelkit.workload.record import LedgerRecord


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
    created = _epoch(record.created_at)
    age = 0 if created is None else max(0, int(now - created))
    amounts = {plugin: held_amounts(alloc) for plugin, alloc in record.allocation.items()}
    return WorkloadStatus(
        agent=record.agent_id,
        workload_id=record.workload.id,
        workload_type=_TYPE_TEXT[record.workload.type],
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


def status_row(
    record: LedgerRecord, liveness: str, now: float, *, owner_alive: bool
) -> dict[str, Any]:
    """``status_of(record, ...).to_json()``, made without the status in between."""
    created = _epoch(record.created_at)
    handle = record.handle
    devices: dict[str, list[str]] = {}
    amounts: dict[str, dict[str, str]] = {}
    for plugin, alloc in record.allocation.items():
        texts = amounts[plugin] = _held_texts(alloc)
        devices[plugin] = list(texts)
    return {
        "agent": record.agent_id,
        "workload": record.workload.id,
        "type": _TYPE_TEXT[record.workload.type],
        "runtime": None if handle is None else handle.runtime,
        "handle": None if handle is None else handle.ident,
        "devices": devices,
        "amounts": amounts,
        "phase": record.phase() if record.hooks else "booked",
        "age_s": 0 if created is None else max(0, int(now - created)),
        "liveness": liveness,
        "owner_alive": owner_alive,
        "unfinished_teardown": list(record.unfinished()) if record.started else [],
        "resource_data": {plugin: dict(values) for plugin, values in record.data.items()},
    }


def _held_texts(alloc: DeviceAllocation) -> dict[str, str]:
    """:func:`held_amounts` as decimal text."""
    if len(alloc) == 1:
        (per_device,) = alloc.values()
        if len(per_device) == 1:  # most workloads hold one device of a plugin
            ((device, amount),) = per_device.items()
            return {device: str(_ZERO + amount)} if amount else {}
    return {device: str(amount) for device, amount in held_amounts(alloc).items()}


#: each workload type's text (an enum's ``value`` is a Python-level look-up, per row)
_TYPE_TEXT = {kind: kind.value for kind in WorkloadType}


@functools.lru_cache(maxsize=256)  # workloads booked in one second share their stamp
def _epoch(stamp: str) -> float | None:
    """``2026-01-31T12:00:00Z`` (how records say when they were made) in epoch seconds."""
    if len(stamp) != 20 or stamp[4] != "-" or stamp[10] != "T" or stamp[-1] != "Z":
        return None
    try:
        return dt.datetime.fromisoformat(stamp[:-1]).replace(tzinfo=dt.UTC).timestamp()
    except ValueError:
        return None


#: a plugin says how a share it granted is held (``enforced:<mechanism>`` or ``advisory``) in
#: its resource data under a name ending so; ``accelkit status`` shows it beside the share
SHARE_ENFORCEMENT_SUFFIX = "_SHARE_ENFORCEMENT"


def share_enforcement(data: dict[str, str]) -> str | None:
    """How a plugin's shares of one workload are held, from its resource data: the mechanism
    (``mps``) where enforced, else ``advisory``; ``None`` where the plugin does not say."""
    for name, value in data.items():
        if name.endswith(SHARE_ENFORCEMENT_SUFFIX):
            return value.removeprefix("enforced:")
    return None


_ZERO = Decimal(0)


def held_amounts(alloc: DeviceAllocation) -> dict[DeviceId, Decimal]:
    """Device → amount held, summed over the slots of one plugin's allocation, sorted by id
    (devices of amount 0 left out)."""
    if len(alloc) == 1:  # one slot: nothing to sum (added to 0 all the same, as a sum is)
        (per_device,) = alloc.values()
        return {d: _ZERO + amount for d, amount in sorted(per_device.items()) if amount}
    held: dict[DeviceId, Decimal] = {}
    for per_device in alloc.values():
        for device, amount in per_device.items():
            if amount:
                held[device] = held.get(device, Decimal(0)) + amount
    return dict(sorted(held.items()))
