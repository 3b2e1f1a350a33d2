"""What ``accelkit status`` shows of a record, as plain JSON values (no status objects: the
command makes thousands of rows, and imports none of :mod:`accelkit.workload.status`)."""

from __future__ import annotations

import datetime as dt
import functools
from decimal import Decimal
from typing import Any

from accelkit.types import DeviceAllocation, DeviceId, WorkloadType
from accelkit.workload.record import LedgerRecord

__all__ = [
    "SHARE_ENFORCEMENT_SUFFIX",
    "TYPE_TEXT",
    "epoch_of",
    "held_amounts",
    "share_enforcement",
    "status_row",
]


def status_row(
    record: LedgerRecord, liveness: str, now: float, *, owner_alive: bool
) -> dict[str, Any]:
    """``status_of(record, ...).to_json()`` (:mod:`accelkit.workload.status`), made without
    the status in between."""
    created = epoch_of(record.created_at)
    handle = record.handle
    devices: dict[str, list[str]] = {}
    amounts: dict[str, dict[str, str]] = {}
    for plugin, alloc in record.allocation.items():
        texts = amounts[plugin] = _held_texts(alloc)
        devices[plugin] = list(texts)
    return {
        "agent": record.agent_id,
        "workload": record.workload.id,
        "type": TYPE_TEXT[record.workload.type],
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
TYPE_TEXT = {kind: kind.value for kind in WorkloadType}


@functools.lru_cache(maxsize=256)  # workloads booked in one second share their stamp
def epoch_of(stamp: str) -> float | None:
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
