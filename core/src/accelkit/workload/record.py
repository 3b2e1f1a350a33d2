"""One ledger record: a workload's allocation and how far its lifecycle got, as JSON.

::

    {"format": "accelkit-ledger", "version": 2,
     "agent": "agent-1",
     "workload": {"id": "pid:4242", "type": "process_tree"},
     "order": ["cuda", "cpu"],
     "allocation": {"cuda": {"cuda.device": {"cuda0": "1"}}, "cpu": {"cpu": {"0": "1"}}},
     "started": {"cuda": ["pre_create", "post_create"], "cpu": ["pre_create", "post_create"]},
     "hooks": {"cuda": ["pre_create", "post_create"], "cpu": ["pre_create"]},
     "teardown": {"attempts": 0, "retry_after": null},
     "owner": {"pid": 4240, "start_time": "1718000000.52"},
     "leader": {"pid": 4242, "start_time": "1718000000.61"},
     "handle": {"runtime": "process", "ident": "/sys/fs/cgroup/...", "details": {}},
     "data": {"cuda": {"CUDA_SHARE_ENFORCEMENT": "enforced:mps"}},
     "created_at": "2024-06-10T06:13:20Z"}

Amounts are decimal strings. ``order`` is the allocation order (hooks run in it). ``started`` lists,
per plugin, the phases whose hook call began (the *intent*, written before the call), ``hooks``
the phases that completed (written after it): a hook in ``started`` but not in ``hooks`` was
interrupted (a crash, a time-out). ``teardown`` counts the attempts to finish a dead workload's
teardown and, after one timed out, when to try again (seconds since the epoch).
``owner`` is the accelkit process managing the workload,
``leader`` the workload's leader process (``null`` until it exists, and for containers),
``handle`` what identifies the workload in its runtime (``null`` until the runtime made it).
``data`` is, per plugin, the resource data its ``pre_create`` returned: what the plugin says of
the grant (``accelkit status`` shows it).
``version`` is the record's schema version: older records are converted when read
(:mod:`accelkit.workload.record_versions`).
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import attrs

from accelkit.events import WorkloadPhase
from accelkit.reprs import attrs_eq, attrs_hash, attrs_repr
from accelkit.runtime.base import WorkloadHandle
from accelkit.runtime.process_stamp import ProcessStamp
from accelkit.types import (
    AMOUNT_DIGITS,
    AgentId,
    DeviceAllocation,
    DeviceId,
    DeviceName,
    SlotName,
    Workload,
    amount_in_range,
    format_amount,
    range_problem,
    to_decimal,
)
from accelkit.workload.record_versions import (
    CURRENT_VERSION,
    FORMAT,
    LedgerFormatError,
    to_current,
)

__all__ = ["MAX_AMOUNT_EXPONENT", "LedgerFormatError", "LedgerRecord"]

#: amounts are refused beyond 10**(this+1) and below 10**-this
#: (:data:`accelkit.types.AMOUNT_DIGITS`)
MAX_AMOUNT_EXPONENT = AMOUNT_DIGITS
_MAX_AMOUNT_TEXT = 64
_FURTHEST_FIRST = tuple(reversed(WorkloadPhase))


# its __init__ fills the instance dict: a sixth of reading one
@attrs.frozen(slots=False, repr=False)
class LedgerRecord:
    """What the ledger knows of one workload."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    agent_id: AgentId
    workload: Workload
    allocation: Mapping[DeviceName, DeviceAllocation]
    order: tuple[DeviceName, ...] = ()
    hooks: Mapping[DeviceName, tuple[WorkloadPhase, ...]] = attrs.field(factory=dict)
    started: Mapping[DeviceName, tuple[WorkloadPhase, ...]] = attrs.field(factory=dict)
    attempts: int = 0
    retry_after: str | None = None
    owner: ProcessStamp | None = None
    leader: ProcessStamp | None = None
    handle: WorkloadHandle | None = None
    #: per plugin, the resource data its ``pre_create`` returned
    data: Mapping[DeviceName, Mapping[str, str]] = attrs.field(factory=dict)
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

    def was_started(self, plugin: DeviceName, phase: WorkloadPhase) -> bool:
        """Whether ``plugin``'s hook call for ``phase`` began (or completed)."""
        return phase in self.started.get(plugin, ()) or self.completed(plugin, phase)

    def with_phase(self, plugin: DeviceName, phase: WorkloadPhase) -> LedgerRecord:
        """A copy that also records ``phase`` as completed by ``plugin``'s hook."""
        hooks = dict(self.hooks)
        if phase not in hooks.get(plugin, ()):
            hooks[plugin] = (*hooks.get(plugin, ()), phase)
        return attrs.evolve(self, hooks=hooks)

    def with_started(self, plugin: DeviceName, phase: WorkloadPhase) -> LedgerRecord:
        """A copy that records the intent: ``plugin``'s hook call for ``phase`` begins."""
        started = dict(self.started)
        if phase not in started.get(plugin, ()):
            started[plugin] = (*started.get(plugin, ()), phase)
        return attrs.evolve(self, started=started)

    def pending_teardown(self) -> tuple[DeviceName, ...]:
        """The plugins whose ``pre_create`` was started and ``post_terminate`` not completed."""
        return tuple(
            p
            for p in self.order
            if self.was_started(p, WorkloadPhase.PRE_CREATE)
            and not self.completed(p, WorkloadPhase.POST_TERMINATE)
        )

    def unfinished(self) -> tuple[str, ...]:
        """``plugin:phase`` for every hook call started and not completed."""
        return tuple(
            f"{plugin}:{phase.value}"
            for plugin in self.order
            for phase in self.started.get(plugin, ())
            if not self.completed(plugin, phase)
        )

    def phase(self) -> str:
        """How far the lifecycle got: the furthest phase any hook completed, or ``booked``."""
        done = {phase for phases in self.hooks.values() for phase in phases}
        for phase in _FURTHEST_FIRST if done else ():
            if phase in done:
                return phase.value
        return "booked"

    def with_data(self, plugin: DeviceName, data: Mapping[str, str]) -> LedgerRecord:
        """A copy that keeps what ``plugin``'s ``pre_create`` said of the grant."""
        return attrs.evolve(self, data={**self.data, plugin: dict(data)})

    def with_leader(self, leader: ProcessStamp | None) -> LedgerRecord:
        """A copy naming the workload's leader process."""
        return attrs.evolve(self, leader=leader)

    def with_handle(self, handle: WorkloadHandle | None) -> LedgerRecord:
        """A copy naming what identifies the workload in its runtime."""
        return attrs.evolve(self, handle=handle)

    def same_claim(self, other: LedgerRecord) -> bool:
        """Whether ``other`` is a later version of this workload's claim.

        A record changes as its workload goes (hooks completed, leader found) but keeps its
        owner, creation time and allocation; when one of those differs, its key was reused.
        """
        return (
            self.owner == other.owner
            and self.created_at == other.created_at
            and self.workload == other.workload
            and self.allocation == other.allocation
        )

    # -- JSON ----------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The record as plain JSON (amounts as decimal strings)."""
        return {
            "format": FORMAT,
            "version": CURRENT_VERSION,
            "agent": self.agent_id,
            "workload": {"id": self.workload.id, "type": self.workload.type.value},
            "order": list(self.order),
            "allocation": {
                plugin: {
                    slot: {dev: _amount_text(amount) for dev, amount in per_device.items()}
                    for slot, per_device in device_alloc.items()
                }
                for plugin, device_alloc in self.allocation.items()
            },
            "started": {
                plugin: [p.value for p in phases] for plugin, phases in self.started.items()
            },
            "hooks": {plugin: [p.value for p in phases] for plugin, phases in self.hooks.items()},
            "teardown": {"attempts": self.attempts, "retry_after": self.retry_after},
            "owner": _stamp_json(self.owner),
            "leader": _stamp_json(self.leader),
            "handle": None if self.handle is None else self.handle.to_json(),
            "data": {plugin: dict(values) for plugin, values in self.data.items()},
            "created_at": self.created_at,
        }

    @classmethod
    def from_json(cls, data: Any) -> LedgerRecord:
        """Parse :meth:`to_json`'s output, of this or any earlier version; raise
        :class:`LedgerFormatError` on anything else."""
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
    return _stamp_of(pid, data["start_time"])


@functools.lru_cache(maxsize=1024)  # a daemon's stamp is in every record it owns
def _stamp_of(pid: int, start_time: str) -> ProcessStamp:
    return ProcessStamp(pid, start_time)


def _handle(data: Any) -> WorkloadHandle | None:
    if data is None:
        return None
    if not isinstance(data, Mapping):
        msg = f"malformed workload handle: {data!r}"
        raise LedgerFormatError(msg)
    return WorkloadHandle.from_json(data)


def _start_time_text(text: str) -> str:
    try:
        return ProcessStamp(1, text).start_time  # a finite, non-negative decimal
    except ValueError:
        msg = f"malformed retry_after: {text!r}"
        raise LedgerFormatError(msg) from None


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        msg = f"{what} must be a non-empty string, got {value!r}"
        raise LedgerFormatError(msg)
    return value


def _amount_text(amount: Decimal) -> str:
    """An amount as a record stores it; one the ledger could not read back is refused here."""
    if not amount_in_range(amount):
        msg = f"amount {range_problem(amount)}"
        raise LedgerFormatError(msg)
    return format_amount(amount)


def _amount(value: Any) -> Decimal:
    if not isinstance(value, str):  # amounts are decimal strings: a JSON number is refused
        msg = f"amount must be a decimal string, got {value!r}"
        raise LedgerFormatError(msg)
    return _amount_of(value)


@functools.lru_cache(maxsize=1024)  # records repeat a few amounts (1 core, 1 GiB...)
def _amount_of(value: str) -> Decimal:
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
    """Plugin -> slot -> device -> amount; each name a non-empty string, each amount valid."""
    allocation: dict[DeviceName, DeviceAllocation] = {}
    for plugin, device_alloc in _items(data):
        if plugin.__class__ is not str or not plugin:
            _text(plugin, "plugin")  # raises
        slots: dict[SlotName, Mapping[DeviceId, Decimal]] = {}
        for slot, per_device in _items(device_alloc):
            if slot.__class__ is not str or not slot:
                _text(slot, "slot")  # raises
            held: dict[DeviceId, Decimal] = {}
            for dev, amount in _items(per_device):
                if dev.__class__ is not str or not dev:
                    _text(dev, "device id")  # raises
                held[dev] = _amount(amount)
            slots[slot] = held
        allocation[plugin] = slots
    return allocation


def _items(data: Any) -> Any:
    """The items of a JSON object (``dict(data)``'s: anything else raises as it does)."""
    return (data if data.__class__ is dict else dict(data)).items()


def _parse(original: Any) -> LedgerRecord:
    data = to_current(original)
    workload = data["workload"]
    allocation = _allocation(data["allocation"])
    order = tuple(data["order"])
    for plugin in order:
        _text(plugin, "plugin")
    plugins = allocation.keys()
    # as many as the allocation's plugins, and the same set: each listed once
    if len(order) != len(plugins) or plugins != set(order):
        msg = f"order {list(order)} does not list each allocated plugin once"
        raise LedgerFormatError(msg)
    hooks = _phases(data["hooks"])
    started = _phases(data["started"])
    if (hooks or started) and (unknown := (hooks.keys() | started.keys()) - plugins):
        msg = f"hooks recorded for plugins without allocation: {sorted(unknown)}"
        raise LedgerFormatError(msg)
    data_of = _plugin_data(data["data"])
    if data_of and (unknown := data_of.keys() - plugins):
        msg = f"resource data recorded for plugins without allocation: {sorted(unknown)}"
        raise LedgerFormatError(msg)
    teardown = data["teardown"]
    if teardown.__class__ is not dict:
        teardown = dict(teardown)
    attempts = teardown["attempts"]
    retry_after = teardown["retry_after"]
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 0:
        msg = f"malformed teardown attempts: {attempts!r}"
        raise LedgerFormatError(msg)
    if retry_after is not None:
        retry_after = _start_time_text(_text(retry_after, "retry_after"))
    return LedgerRecord(  # by position: a record is made for each row read
        AgentId(_text(data["agent"], "agent")),
        Workload(_text(workload["id"], "workload id"), workload["type"]),
        allocation,
        order,
        hooks,
        started,
        attempts,
        retry_after,
        _stamp(data["owner"]),
        _stamp(data["leader"]),
        _handle(data["handle"]),
        data_of,
        _text(data["created_at"], "created_at"),
    )


def _phases(data: Any) -> dict[DeviceName, tuple[WorkloadPhase, ...]]:
    """Per plugin, phases (``hooks``, ``started``): most records list the same few."""
    if data.__class__ is dict and not data:
        return {}
    return {
        DeviceName(_text(plugin, "plugin")): _phase_tuple(tuple(phases))
        for plugin, phases in dict(data).items()
    }


@functools.lru_cache(maxsize=256)
def _phase_tuple(names: tuple[Any, ...]) -> tuple[WorkloadPhase, ...]:
    return tuple(WorkloadPhase(p) for p in names)


def _plugin_data(data: Any) -> dict[DeviceName, dict[str, str]]:
    if data.__class__ is dict and not data:
        return {}
    if not isinstance(data, Mapping):
        msg = f"malformed resource data: {data!r}"
        raise LedgerFormatError(msg)
    parsed: dict[DeviceName, dict[str, str]] = {}
    for plugin, values in data.items():
        if not isinstance(values, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in values.items()
        ):
            msg = f"malformed resource data of {plugin!r}: {values!r}"
            raise LedgerFormatError(msg)
        parsed[DeviceName(_text(plugin, "plugin"))] = dict(values)
    return parsed
