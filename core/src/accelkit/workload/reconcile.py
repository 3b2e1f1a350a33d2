"""Bringing a host's alloc maps in step with the ledger, and finishing dead workloads' teardown.

What happens to each record of the ledger that this process does not manage itself:

* its **owner** (the accelkit process that created it) still runs → someone else manages it: its
  allocation is applied to our maps and left alone;
* else its **leader** process still runs (same pid, same start time) → the workload outlived its
  manager: its allocation is applied and kept;
* else it is **gone** → its teardown is finished from the record: each hook whose ``pre_create``
  completed and ``post_terminate`` did not gets ``post_terminate`` (hooks are stateless), what we
  applied of it is freed, and the record is removed;
* a record with neither stamp alive nor a leader to check (a container record, say) is kept and
  reported, since its liveness cannot be told from here; a ``liveness`` callback can decide.

A device booked beyond its capacity (two records claiming the same GPU) is **reported**, not
fixed: the claim that does not fit stays unapplied and its record stays in the ledger; it is
tried again, and reported again, on every sync, so it is applied once the other claim is gone.
Records naming an agent or plugin this host does not have are reported and left untouched, and
so is a record that fails in any other way: one bad record never stops a reconciliation.

A record is applied once and then only checked: when its key turns up with another owner,
creation time or allocation (the workload id was reused), the old claim is freed and the new one
applied.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING

import attrs

from accelkit.errors import AccelkitError, InvalidResourceArgument
from accelkit.events import WorkloadPhase
from accelkit.plugin import AbstractLifecycleHook
from accelkit.types import AgentId, DeviceAllocation, DeviceId, DeviceName, SlotName
from accelkit.workload.ledger import Ledger, LedgerScan, SetAside
from accelkit.workload.lifecycle import EventSink, WorkloadLifecycle
from accelkit.workload.record import LedgerRecord

if TYPE_CHECKING:
    from accelkit.host import AgentView

log = logging.getLogger(__name__)

RecordKey = tuple[AgentId, str]


class Liveness(enum.Enum):
    """What the ledger can tell of a record's workload."""

    MANAGED = "managed"  # its owner process runs
    RUNNING = "running"  # its leader process runs
    GONE = "gone"
    UNKNOWN = "unknown"


def liveness_of(record: LedgerRecord) -> Liveness:
    """The liveness of a record by its owner and leader stamps."""
    if record.owner is not None and record.owner.is_running():
        return Liveness.MANAGED
    if record.leader is not None:
        return Liveness.RUNNING if record.leader.is_running() else Liveness.GONE
    if record.workload.type.value == "process_tree":
        return Liveness.GONE  # never got a leader, and nobody manages it any more
    return Liveness.UNKNOWN


@attrs.frozen
class DoubleBooking:
    """A device claimed beyond its capacity by the records listed in ``claims``."""

    agent_id: AgentId
    plugin: DeviceName
    slot: SlotName
    device_id: DeviceId
    capacity: Decimal
    claims: tuple[tuple[str, Decimal], ...]  # (workload id, amount)
    detail: str = ""


@attrs.frozen
class TornDown:
    """A dead workload whose teardown was finished from its record."""

    agent_id: AgentId
    workload_id: str
    post_terminated: tuple[DeviceName, ...]
    errors: tuple[str, ...] = ()


@attrs.frozen
class ReconcileReport:
    """What reconciling found and did."""

    kept: tuple[RecordKey, ...] = ()
    torn_down: tuple[TornDown, ...] = ()
    double_booked: tuple[DoubleBooking, ...] = ()
    set_aside: tuple[SetAside, ...] = ()
    problems: tuple[str, ...] = ()

    @property
    def clean(self) -> bool:
        """Nothing for an operator to look at."""
        return not (self.double_booked or self.set_aside or self.problems)

    def messages(self) -> list[str]:
        """One line per finding, for logs and the command line."""
        lines = [
            f"ledger: finished the teardown of dead workload {t.workload_id!r}"
            + (f" ({'; '.join(t.errors)})" if t.errors else "")
            for t in self.torn_down
        ]
        lines += [
            f"ledger: device {d.device_id!r} ({d.slot}) of agent {d.agent_id!r} is booked "
            f"beyond its capacity {d.capacity}: " + ", ".join(f"{w} holds {a}" for w, a in d.claims)
            for d in self.double_booked
        ]
        lines += [
            f"ledger: set aside unreadable record {s.path} ({s.reason})"
            + (f" -> {s.moved_to}" if s.moved_to else " (could not move it)")
            for s in self.set_aside
        ]
        lines += [f"ledger: {p}" for p in self.problems]
        return lines


class Reconciler:
    """Applies other processes' records to a host's maps and finishes dead ones."""

    def __init__(
        self,
        ledger: Ledger,
        agents: Mapping[AgentId, AgentView],
        *,
        liveness: Callable[[LedgerRecord], Liveness] = liveness_of,
        notify: EventSink | None = None,
    ) -> None:
        self.ledger = ledger
        self.agents = agents
        self.liveness = liveness
        #: told of the ``post_terminate`` of each dead workload whose teardown is finished here
        self.notify = notify
        #: what of other processes' records is applied to our maps, per record and plugin
        self.applied: dict[RecordKey, dict[DeviceName, DeviceAllocation]] = {}
        #: the record each entry of :attr:`applied` was applied from
        self._sources: dict[RecordKey, LedgerRecord] = {}

    async def sync(
        self, scan: LedgerScan, owned: Mapping[RecordKey, LedgerRecord]
    ) -> ReconcileReport:
        """Make the maps hold exactly the live records; call with the ledger locked.

        A part of a record that could not be applied (double booking, say) is tried again, and
        reported again, on every sync until it applies. A record whose key now names another
        workload (another owner, creation time or allocation) has the old claim freed and the new
        one applied. Anything one record raises is reported as a problem with it, never raised.
        """
        kept: list[RecordKey] = []
        torn: list[TornDown] = []
        booked: list[DoubleBooking] = []
        problems: list[str] = []
        ours = set(owned)  # also those released while a teardown below is awaited
        for key in [k for k in self.applied if k not in scan.records]:
            self._free_applied(key, problems)  # another process finished it
        for key, record in scan.records.items():
            if key in owned or key in ours:
                continue
            try:
                state = self.liveness(record)
                if state is Liveness.GONE:
                    if (done := await self._finish(record, problems)) is not None:
                        torn.append(done)
                    continue
                if state is Liveness.UNKNOWN:
                    problems.append(f"cannot tell whether workload {key[1]!r} is alive; kept it")
                source = self._sources.get(key)
                if source is not None and not _same_claim(source, record):
                    self._free_applied(key, problems)  # the key was reused by another workload
                self._apply(record, owned, booked, problems)
                kept.append(key)
            except Exception as exc:
                log.debug("reconciling %r failed", key, exc_info=True)
                problems.append(
                    f"workload {key[1]!r} of agent {key[0]!r}: cannot reconcile it "
                    f"({type(exc).__name__}: {_short(exc)}); left it in the ledger"
                )
        return ReconcileReport(
            tuple(kept), tuple(torn), tuple(booked), scan.set_aside, tuple(problems)
        )

    # -- applying ------------------------------------------------------------------------------

    def _apply(
        self,
        record: LedgerRecord,
        owned: Mapping[RecordKey, LedgerRecord],
        booked: list[DoubleBooking],
        problems: list[str],
    ) -> None:
        """Apply the parts of ``record`` not applied yet; report those that do not apply."""
        agent = self.agents.get(record.agent_id)
        if agent is None:
            problems.append(
                f"workload {record.workload.id!r} names unknown agent "
                f"{record.agent_id!r}; left it in the ledger"
            )
            return
        applied = self.applied.setdefault(record.key, {})
        self._sources[record.key] = record
        for plugin in record.order:
            if plugin in applied:
                continue
            alloc = record.allocation[plugin]
            ctx = agent.contexts.get(plugin)
            if ctx is None:
                problems.append(
                    f"workload {record.workload.id!r} holds devices of plugin "
                    f"{plugin!r}, which agent {record.agent_id!r} lacks"
                )
                continue
            try:
                ctx.alloc_map.apply_allocation(alloc)
            except InvalidResourceArgument as exc:
                found = self._double_bookings(record, plugin, alloc, owned, str(exc))
                booked.extend(found)
                if not found:
                    problems.append(f"workload {record.workload.id!r}, plugin {plugin!r}: {exc}")
                continue
            except Exception as exc:
                log.debug("applying %r, plugin %r failed", record.key, plugin, exc_info=True)
                problems.append(
                    f"workload {record.workload.id!r}, plugin {plugin!r}: cannot apply "
                    f"({type(exc).__name__}: {_short(exc)})"
                )
                continue
            applied[plugin] = alloc

    def _double_bookings(
        self,
        record: LedgerRecord,
        plugin: DeviceName,
        alloc: DeviceAllocation,
        owned: Mapping[RecordKey, LedgerRecord],
        detail: str,
    ) -> list[DoubleBooking]:
        ctx = self.agents[record.agent_id].contexts[plugin]
        current = ctx.alloc_map.allocations
        slots = ctx.alloc_map.device_slots
        found = []
        for slot, per_device in alloc.items():
            for device_id, amount in per_device.items():
                info = slots.get(device_id)
                held = current.get(slot, {}).get(device_id)
                if info is None or held is None or held + amount <= info.amount:
                    continue
                claims = self._claims(plugin, slot, device_id, owned)
                claims.append((record.workload.id, amount))
                found.append(
                    DoubleBooking(
                        record.agent_id, plugin, slot, device_id, info.amount, tuple(claims), detail
                    )
                )
        return found

    def _claims(
        self,
        plugin: DeviceName,
        slot: SlotName,
        device_id: DeviceId,
        owned: Mapping[RecordKey, LedgerRecord],
    ) -> list[tuple[str, Decimal]]:
        holders: list[tuple[str, Decimal]] = []
        sources = [(k[1], a) for k, a in self.applied.items()]
        sources += [(k[1], dict(r.allocation)) for k, r in owned.items()]
        for workload_id, allocation in sources:
            amount = allocation.get(plugin, {}).get(slot, {}).get(device_id)
            if amount:
                holders.append((workload_id, amount))
        return holders

    def _free_applied(self, key: RecordKey, problems: list[str]) -> None:
        applied = self.applied.pop(key, {})
        self._sources.pop(key, None)
        agent = self.agents.get(key[0])
        for plugin, alloc in applied.items():
            try:
                if agent is not None:
                    agent.contexts[plugin].alloc_map.free(alloc)
            except Exception as exc:
                problems.append(
                    f"freeing workload {key[1]!r}, plugin {plugin!r}: {_short(exc) or exc!r}"
                )

    # -- finishing dead workloads -------------------------------------------------------------

    async def _finish(self, record: LedgerRecord, problems: list[str]) -> TornDown | None:
        agent = self.agents.get(record.agent_id)
        pending = [
            p
            for p in record.order
            if record.completed(p, WorkloadPhase.PRE_CREATE)
            and not record.completed(p, WorkloadPhase.POST_TERMINATE)
        ]
        hooks: list[tuple[DeviceName, AbstractLifecycleHook]] = []
        for plugin in pending:
            ctx = agent.contexts.get(plugin) if agent is not None else None
            if ctx is None:
                problems.append(
                    f"cannot finish the teardown of workload {record.workload.id!r}: agent "
                    f"{record.agent_id!r} has no plugin {plugin!r} here; left it in the ledger"
                )
                return None
            hooks.append(
                (plugin, ctx.create_lifecycle_hook(record.workload, record.allocation[plugin]))
            )
        done: list[DeviceName] = []
        current = [record]

        def on_phase(plugin: DeviceName, phase: WorkloadPhase) -> None:
            done.append(plugin)
            current[0] = current[0].with_phase(plugin, phase)
            self.ledger.write(current[0])  # a crash now does not repeat this hook

        def release() -> None:
            self._free_applied(record.key, problems)
            self.ledger.remove(*record.key)

        driver = WorkloadLifecycle.resume(
            record.agent_id,
            record.workload,
            hooks,
            release=release,
            on_phase=on_phase,
            allocation=record.allocation,
            notify=self.notify,
        )
        errors: list[str] = []
        try:
            await driver.post_terminate()
        except AccelkitError as exc:
            errors.append(str(exc))
        return TornDown(record.agent_id, record.workload.id, tuple(done), tuple(errors))


def _same_claim(old: LedgerRecord, new: LedgerRecord) -> bool:
    """Whether two versions of a record are the same workload's claim.

    A record changes as its workload goes (hooks completed, leader found) but keeps its owner,
    creation time and allocation; when one of those differs, its key was reused.
    """
    return (
        old.owner == new.owner
        and old.created_at == new.created_at
        and old.workload == new.workload
        and old.allocation == new.allocation
    )


def _short(exc: BaseException, limit: int = 200) -> str:
    text = str(exc)
    return text if len(text) <= limit else text[:limit] + "..."
