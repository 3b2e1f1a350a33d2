"""One ledger record: a workload's allocation and how far its lifecycle got, as JSON.

::

    {"format": "accelkit-ledger/1",
     "agent": "agent-1",
     "workload": {"id": "pid:4242", "type": "process_tree"},
     "order": ["cuda", "cpu"],
     "allocation": {"cuda": {"cuda.device": {"cuda0": "1"}}, "cpu": {"cpu": {"0": "1"}}},
     "hooks": {"cuda": ["pre_create", "post_create"], "cpu": ["pre_create"]},
     "owner": {"pid": 4240, "start_time": "1718000000.52"},
     "leader": {"pid": 4242, "start_time": "1718000000.61"},
     "handle": {"runtime": "process", "ident": "/sys/fs/cgroup/...", "details": {}},
     "created_at": "2024-06-10T06:13:20Z"}

Amounts are decimal strings. ``order`` is the allocation order (hooks run in it). ``hooks`` lists,
per plugin, the phases that completed. ``owner`` is the accelkit process managing the workload,
``leader`` the workload's leader process (``null`` until it exists, and for containers),
``handle`` what identifies the workload in its runtime (``null`` until the runtime made it).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import attrs

from accelkit.events import WorkloadPhase
from accelkit.runtime.base import WorkloadHandle
from accelkit.types import (
    AgentId,
    DeviceAllocation,
    DeviceId,
    DeviceName,
    SlotName,
    Workload,
    format_amount,
    to_decimal,
)
from accelkit.workload.liveness import ProcessStamp

FORMAT = "accelkit-ledger/1"

#: amounts are refused beyond 10**(this+1) and below 10**-this: no device comes near, and amounts
#: in range stay exact under the default decimal context (28 digits) when rendered and compared
MAX_AMOUNT_EXPONENT = 24
_MAX_AMOUNT_TEXT = 64


class LedgerFormatError(ValueError):
    """A ledger file does not hold a valid record."""


@attrs.frozen
class LedgerRecord:
    """What the ledger knows of one workload."""

    agent_id: AgentId
    workload: Workload
    allocation: Mapping[DeviceName, DeviceAllocation]
    order: tuple[DeviceName, ...] = ()
    hooks: Mapping[DeviceName, tuple[WorkloadPhase, ...]] = attrs.field(factory=dict)
    owner: ProcessStamp | None = None
    leader: ProcessStamp | None = None
    handle: WorkloadHandle | None = None
    created_at: str = attrs.field(
        factory=lambda: dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    )

    @property
    def key(self) -> tuple[AgentId, str]:
        """``(agent id, workload id)``: unique in a ledger."""
        return (self.agent_id, self.workload.id)

    def completed(self, plugin: DeviceName, phase: WorkloadPhase) -> bool:
        """Whether ``plugin``'s hook finished ``phase``."""
        return phase in self.hooks.get(plugin, ())

    def with_phase(self, plugin: DeviceName, phase: WorkloadPhase) -> LedgerRecord:
        """A copy that also records ``phase`` as completed by ``plugin``'s hook."""
        hooks = dict(self.hooks)
        hooks[plugin] = (*hooks.get(plugin, ()), phase)
        return attrs.evolve(self, hooks=hooks)

    def with_leader(self, leader: ProcessStamp | None) -> LedgerRecord:
        """A copy naming the workload's leader process."""
        return attrs.evolve(self, leader=leader)

    def with_handle(self, handle: WorkloadHandle | None) -> LedgerRecord:
        """A copy naming what identifies the workload in its runtime."""
        return attrs.evolve(self, handle=handle)

    # -- JSON ----------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The record as plain JSON (amounts as decimal strings)."""
        return {
            "format": FORMAT,
            "agent": self.agent_id,
            "workload": {"id": self.workload.id, "type": self.workload.type.value},
            "order": list(self.order),
            "allocation": {
                plugin: {
                    slot: {dev: format_amount(amount) for dev, amount in per_device.items()}
                    for slot, per_device in device_alloc.items()
                }
                for plugin, device_alloc in self.allocation.items()
            },
            "hooks": {plugin: [p.value for p in phases] for plugin, phases in self.hooks.items()},
            "owner": _stamp_json(self.owner),
            "leader": _stamp_json(self.leader),
            "handle": None if self.handle is None else self.handle.to_json(),
            "created_at": self.created_at,
        }

    @classmethod
    def from_json(cls, data: Any) -> LedgerRecord:
        """Parse :meth:`to_json`'s output; raise :class:`LedgerFormatError` on anything else."""
        try:
            return _parse(data)
        except LedgerFormatError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            msg = f"malformed ledger record: {type(exc).__name__}: {exc}"
            raise LedgerFormatError(msg) from None


def _stamp_json(stamp: ProcessStamp | None) -> dict[str, Any] | None:
    return None if stamp is None else {"pid": stamp.pid, "start_time": stamp.start_time}


def _stamp(data: Any) -> ProcessStamp | None:
    if data is None:
        return None
    pid = data["pid"]
    if isinstance(pid, bool) or not isinstance(pid, int) or not isinstance(data["start_time"], str):
        msg = f"malformed process stamp: {data!r}"
        raise LedgerFormatError(msg)
    return ProcessStamp(pid, data["start_time"])


def _handle(data: Any) -> WorkloadHandle | None:
    if data is None:
        return None
    if not isinstance(data, Mapping):
        msg = f"malformed workload handle: {data!r}"
        raise LedgerFormatError(msg)
    return WorkloadHandle.from_json(data)


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        msg = f"{what} must be a non-empty string, got {value!r}"
        raise LedgerFormatError(msg)
    return value


def _amount(value: Any) -> Decimal:
    if not isinstance(value, str):  # amounts are decimal strings: a JSON number is refused
        msg = f"amount must be a decimal string, got {value!r}"
        raise LedgerFormatError(msg)
    if len(value) > _MAX_AMOUNT_TEXT:
        msg = f"amount {_clip(value)} is out of range"
        raise LedgerFormatError(msg)
    amount = to_decimal(value)  # refuses NaN and infinities (ValueError)
    if amount < 0:
        msg = f"negative amount {value!r}"
        raise LedgerFormatError(msg)
    exponent = amount.as_tuple().exponent
    if (
        not isinstance(exponent, int)
        or amount.adjusted() > MAX_AMOUNT_EXPONENT
        or exponent < -MAX_AMOUNT_EXPONENT
    ):
        msg = f"amount {_clip(value)} is out of range"
        raise LedgerFormatError(msg)
    return amount


def _clip(text: str, limit: int = 40) -> str:
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text)} chars)"


def _allocation(data: Any) -> dict[DeviceName, DeviceAllocation]:
    return {
        DeviceName(_text(plugin, "plugin")): {
            SlotName(_text(slot, "slot")): {
                DeviceId(_text(dev, "device id")): _amount(amount)
                for dev, amount in dict(per_device).items()
            }
            for slot, per_device in dict(device_alloc).items()
        }
        for plugin, device_alloc in dict(data).items()
    }


def _parse(data: Any) -> LedgerRecord:
    if not isinstance(data, Mapping) or data.get("format") != FORMAT:
        msg = f"not a ledger record of format {FORMAT!r}"
        raise LedgerFormatError(msg)
    workload = data["workload"]
    allocation = _allocation(data["allocation"])
    order = tuple(DeviceName(_text(p, "plugin")) for p in data["order"])
    if set(order) != set(allocation) or len(order) != len(set(order)):
        msg = f"order {list(order)} does not list each allocated plugin once"
        raise LedgerFormatError(msg)
    hooks = {
        DeviceName(_text(plugin, "plugin")): tuple(WorkloadPhase(p) for p in phases)
        for plugin, phases in dict(data["hooks"]).items()
    }
    if unknown := set(hooks) - set(allocation):
        msg = f"hooks recorded for plugins without allocation: {sorted(unknown)}"
        raise LedgerFormatError(msg)
    return LedgerRecord(
        agent_id=AgentId(_text(data["agent"], "agent")),
        workload=Workload(_text(workload["id"], "workload id"), workload["type"]),
        allocation=allocation,
        order=order,
        hooks=hooks,
        owner=_stamp(data["owner"]),
        leader=_stamp(data["leader"]),
        handle=_handle(data.get("handle")),
        created_at=_text(data["created_at"], "created_at"),
    )
