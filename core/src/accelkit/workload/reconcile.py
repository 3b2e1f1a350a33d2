"""Bringing a host's alloc maps in step with the ledger, and finishing dead workloads' teardown.

Two kinds of sync. The **incremental** one (:meth:`Reconciler.apply_changes`, before every
booking) applies the records other processes wrote since the last sync and frees those they
removed; it checks no liveness, so its cost does not depend on the number of live workloads.
The **full** one (:meth:`Reconciler.judge`, outside the ledger's transaction, then
:meth:`Reconciler.sync_judged` in it: when the node opens, for ``status`` and ``release``, and
when an allocation fails for lack of room) judges every record this process does not manage:

* its **owner** (the accelkit process that created it) still runs → someone else manages it: its
  allocation is applied to our maps and left alone;
* else, when it has a runtime **handle**, the runtime says: alive → applied and kept; gone →
  dead; cannot tell (a container engine that does not answer) → kept and reported. A record
  whose runtime is not installed here is kept and reported too, never judged dead;
* else its **leader** process still runs (same pid, same start time) → applied and kept;
* else it is **gone** → dead: the caller finishes its teardown (:meth:`Reconciler.finish`): the
  runtime removes what is left, each hook whose ``pre_create`` was *started* and whose
  ``post_terminate`` did not complete gets ``post_terminate`` (hooks are stateless), what we
  applied of it is freed and the record removed. A ``post_terminate`` that times out leaves the
  record (and its devices) in place with the hook recorded as unfinished; it is tried again after
  a back-off, and never holds up anything else;
* a record with no way to tell (a container record without its runtime) is kept and reported.

A device booked beyond its capacity (two records claiming the same GPU) is **reported**, not
fixed: the claim that does not fit stays unapplied and its record stays in the ledger; it is
tried again, and reported again, on every sync, so it is applied once the other claim is gone.
Records naming an agent or plugin this host does not have are reported and left untouched, and
so is a record that fails in any other way: one bad record never stops a reconciliation.

A record is applied once, then only checked: when its key turns up with another owner, creation
time or allocation (the workload id was reused), the old claim is freed and the new one applied.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING

import attrs

from accelkit.calls import DEFAULT_CALL_TIMEOUT, DEFAULT_HOOK_TIMEOUT, call_async
from accelkit.errors import AccelkitError, InvalidResourceArgument
from accelkit.events import WorkloadPhase
from accelkit.plugin import AbstractLifecycleHook
from accelkit.runtime.base import Runtime, WorkloadHandle
from accelkit.types import AgentId, DeviceAllocation, DeviceId, DeviceName, SlotName, WorkloadType
from accelkit.workload.ledger import Ledger, LedgerScan
from accelkit.workload.liveness import (  # noqa: F401 - liveness_of: its old home
    Liveness,
    Running,
    RunningMemo,
    by_leader,
    liveness_of,
)
from accelkit.workload.reconcile_report import DoubleBooking, ReconcileReport, RecordKey, TornDown
from accelkit.workload.record import LedgerRecord

if TYPE_CHECKING:
    from accelkit.host import AgentView
    from accelkit.workload.lifecycle import EventSink

log = logging.getLogger(__name__)


#: after a ``post_terminate`` timed out, the next try waits this long, doubled per attempt
RETRY_BACKOFF_S = 60
RETRY_BACKOFF_MAX_S = 3600


class Reconciler:
    """Applies other processes' records to a host's maps and finishes dead ones."""

    def __init__(
        self,
        ledger: Ledger,
        agents: Mapping[AgentId, AgentView],
        *,
        liveness: Callable[[LedgerRecord], Liveness] | None = None,
        notify: EventSink | None = None,
        runtimes: Mapping[str, Runtime] | None = None,
        hook_timeout: Decimal = DEFAULT_HOOK_TIMEOUT,
        call_timeout: Decimal = DEFAULT_CALL_TIMEOUT,
    ) -> None:
        self.ledger = ledger
        self.agents = agents
        #: replaces :meth:`liveness` (tests decide what is alive)
        self.liveness_override = liveness
        #: told of the ``post_terminate`` of each dead workload whose teardown is finished here
        self.notify = notify
        self.runtimes: Mapping[str, Runtime] = runtimes if runtimes is not None else {}
        self.hook_timeout = hook_timeout
        self.call_timeout = call_timeout
        #: what of other processes' records is applied to our maps, per record and plugin
        self.applied: dict[RecordKey, dict[DeviceName, DeviceAllocation]] = {}
        #: the record each entry of :attr:`applied` was applied from
        self._sources: dict[RecordKey, LedgerRecord] = {}
        #: records with a part that did not apply (double bookings): retried at every sync
        self._unapplied: dict[RecordKey, LedgerRecord] = {}

    async def liveness(self, record: LedgerRecord, running: Running | None = None) -> Liveness:
        """Owner process, else the runtime through the handle, else the leader process.

        ``running`` replaces each process stamp's own check (:meth:`judge` passes a memo).
        """
        if self.liveness_override is not None:
            return self.liveness_override(record)
        if record.owner is not None and (
            record.owner.is_running() if running is None else running(record.owner)
        ):
            return Liveness.MANAGED
        handle = self.handle_of(record)
        if handle is None:
            return by_leader(record, running)
        runtime = self.runtimes.get(handle.runtime)
        if runtime is None:  # only its runtime can tell: never judged dead without it
            return Liveness.UNKNOWN
        alive = await call_async(
            runtime.name, "is_alive", self.call_timeout, lambda: runtime.is_alive(handle)
        )
        if alive is None:
            return Liveness.UNKNOWN
        return Liveness.RUNNING if alive else Liveness.GONE

    def why_unknown(self, record: LedgerRecord) -> str:
        """Why a record's liveness is ``UNKNOWN``, for the report."""
        handle = self.handle_of(record)
        if handle is None:
            return "nothing tells whether it runs"
        if handle.runtime not in self.runtimes:
            return f"its runtime {handle.runtime!r} is not installed here"
        return f"runtime {handle.runtime!r} cannot tell whether it runs"

    def handle_of(self, record: LedgerRecord) -> WorkloadHandle | None:
        """The record's handle; for a container record whose handle was never written
        (accelkit died between booking and recording the create) the one container runtime's
        handle by the workload id, the name it gives the container: a missing one is gone
        rather than unknown forever, and one that was created is found and removed."""
        if record.handle is not None:
            return record.handle
        if record.workload.type is not WorkloadType.CONTAINER:
            return None
        runtimes = [
            r
            for r in self.runtimes.values()
            if r.workload_type is WorkloadType.CONTAINER and r.creates_containers
        ]
        if len(runtimes) != 1:
            return None
        return WorkloadHandle(runtimes[0].name, record.workload.id)

    def apply_changes(
        self,
        records: Mapping[RecordKey, LedgerRecord],
        removed: tuple[RecordKey, ...],
        owned: Mapping[RecordKey, LedgerRecord],
        skip: frozenset[RecordKey] = frozenset(),
        *,
        retry: bool = True,
    ) -> ReconcileReport:
        """The incremental sync: apply what others wrote, free what they removed.

        With ``retry``, the claims that did not fit before (double bookings) are tried again.

        No liveness is checked (that is the full sync's job), so the cost is that of the
        changes alone. Call with the ledger's transaction held.
        """
        booked: list[DoubleBooking] = []
        problems: list[str] = []
        for key in removed:
            if key in self.applied:
                self._free_applied(key, problems)
            self._unapplied.pop(key, None)
        for key, record in list(self._unapplied.items()) if retry else ():
            if key not in records and key not in owned and key not in skip:
                self._apply_guarded(record, owned, booked, problems)
        for key, record in records.items():
            if key in owned or key in skip:
                continue
            self._apply_guarded(record, owned, booked, problems)
        return ReconcileReport((), (), tuple(booked), (), tuple(problems))

    def apply_all(
        self,
        scan: LedgerScan,
        owned: Mapping[RecordKey, LedgerRecord],
        skip: frozenset[RecordKey] = frozenset(),
    ) -> ReconcileReport:
        """:meth:`apply_changes` with every record (when the removals needed were pruned)."""
        gone = tuple(k for k in self.applied if k not in scan.records)
        report = self.apply_changes(scan.records, gone, owned, skip)
        return attrs.evolve(report, set_aside=scan.set_aside)

    async def judge(
        self, records: Mapping[RecordKey, LedgerRecord], skip: frozenset[RecordKey]
    ) -> tuple[dict[RecordKey, Liveness], list[str]]:
        """Every record's liveness (those in ``skip`` left out), asked side by side.

        Call it *outside* the ledger's transaction: runtimes may take up to the call time
        limit to answer, and the transaction would hold every other process's bookings. A
        record whose liveness cannot be told (or whose check raises) is ``UNKNOWN``, reported.
        Each process stamp is checked once, however many records name it.
        """
        keys = [k for k in records if k not in skip]
        problems: list[str] = []
        running = RunningMemo()

        async def one(key: RecordKey) -> Liveness:
            try:
                state = await self.liveness(records[key], running)
            except Exception as exc:
                problems.append(
                    f"cannot tell whether workload {key[1]!r} is alive "
                    f"({type(exc).__name__}: {_short(exc)}); kept it"
                )
                return Liveness.UNKNOWN
            if state is Liveness.UNKNOWN:
                problems.append(
                    f"cannot tell whether workload {key[1]!r} is alive "
                    f"({self.why_unknown(records[key])}); its devices stay booked"
                )
            return state

        # a record only process stamps can tell is judged in line: it never waits, and a task
        # for each of thousands of them cost more than their checks
        asked = [
            k
            for k in keys
            if self.liveness_override is None and self.handle_of(records[k]) is not None
        ]
        told = dict(zip(asked, await asyncio.gather(*(one(k) for k in asked)), strict=True))
        return {k: told[k] if k in told else await one(k) for k in keys}, problems

    def sync_judged(
        self,
        scan: LedgerScan,
        states: Mapping[RecordKey, Liveness],
        owned: Mapping[RecordKey, LedgerRecord],
        skip: frozenset[RecordKey] = frozenset(),
    ) -> tuple[ReconcileReport, list[LedgerRecord]]:
        """Apply the live records of ``scan``; the report and the dead ones.

        ``states`` comes from :meth:`judge`; a record it lacks (written since) is applied as
        live. The dead records are not applied; :meth:`finish` applies one whose teardown is
        left unfinished (its devices stay taken until a retry succeeds). Anything one record
        raises is reported as a problem with it, never raised. Call with the ledger's
        transaction held.
        """
        kept: list[RecordKey] = []
        dead: list[LedgerRecord] = []
        booked: list[DoubleBooking] = []
        problems: list[str] = []
        ours = set(owned) | skip  # also those released while a teardown is awaited
        for key in [k for k in self.applied if k not in scan.records]:
            self._free_applied(key, problems)  # another process finished it
        for key, record in scan.records.items():
            if key in ours:
                continue
            if states.get(key) is Liveness.GONE:
                dead.append(record)  # not applied: finished (and then freed) by the caller
                continue
            self._apply_guarded(record, owned, booked, problems)
            kept.append(key)
        report = ReconcileReport(tuple(kept), (), tuple(booked), scan.set_aside, tuple(problems))
        return report, dead

    def _apply_guarded(
        self,
        record: LedgerRecord,
        owned: Mapping[RecordKey, LedgerRecord],
        booked: list[DoubleBooking],
        problems: list[str],
    ) -> None:
        key = record.key
        try:
            source = self._sources.get(key)
            if source is not None and not source.same_claim(record):
                self._free_applied(key, problems)  # the key was reused by another workload
            self._apply(record, owned, booked, problems)
        except Exception as exc:
            log.debug("reconciling %r failed", key, exc_info=True)
            problems.append(
                f"workload {key[1]!r} of agent {key[0]!r}: cannot reconcile it "
                f"({type(exc).__name__}: {_short(exc)}); left it in the ledger"
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
        applied = self.applied.setdefault(key := record.key, {})
        self._sources[key] = record
        self._unapplied.pop(key, None)
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
                self._unapplied[key] = record
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
        self._unapplied.pop(key, None)
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

    def forget(self, key: RecordKey, problems: list[str]) -> None:
        """Free what is applied of a record (it was released)."""
        self._free_applied(key, problems)

    def hold(self, record: LedgerRecord) -> None:
        """Count a record this process booked as applied (it gives up managing it)."""
        self.applied[record.key] = dict(record.allocation)
        self._sources[record.key] = record

    async def finish(
        self,
        record: LedgerRecord,
        problems: list[str],
        *,
        force: bool = False,
        stop: Callable[[], Awaitable[object]] | None = None,
    ) -> TornDown | None:
        """Finish a dead workload's teardown from its record; ``None`` when it cannot be.

        Each hook whose ``pre_create`` was started and ``post_terminate`` not completed gets
        ``post_terminate`` (the intent and the result recorded around each call). Then the
        allocation is freed and the record removed — unless a ``post_terminate`` timed out: then
        the record stays (its devices booked) with the hook unfinished and a time to retry,
        except with ``force``, which frees it anyway.
        """
        agent = self.agents.get(record.agent_id)
        hooks: list[tuple[DeviceName, AbstractLifecycleHook]] = []
        for plugin in record.pending_teardown():
            ctx = agent.contexts.get(plugin) if agent is not None else None
            if ctx is None:
                problems.append(
                    f"cannot finish the teardown of workload {record.workload.id!r}: agent "
                    f"{record.agent_id!r} has no plugin {plugin!r} here; left it in the ledger"
                )
                if not force:
                    return None
                continue
            hooks.append(
                (plugin, ctx.create_lifecycle_hook(record.workload, record.allocation[plugin]))
            )
        errors: list[str] = []
        if stop is not None:
            try:
                await stop()
            except Exception as exc:
                errors.append(f"removing what is left of it: {type(exc).__name__}: {exc}")
        done: list[DeviceName] = []
        current = [record]
        drivers: list[WorkloadLifecycle] = []
        from accelkit.workload.lifecycle import WorkloadLifecycle  # not on status's way

        def on_start(plugin: DeviceName, phase: WorkloadPhase) -> None:
            current[0] = current[0].with_started(plugin, phase)
            self.ledger.write(current[0])  # the intent, before the call

        def on_phase(plugin: DeviceName, phase: WorkloadPhase) -> None:
            done.append(plugin)
            current[0] = current[0].with_phase(plugin, phase)
            self.ledger.write(current[0])  # a crash now does not repeat this hook

        def release() -> None:
            if drivers[0].unfinished and not force:
                attempts = current[0].attempts + 1
                wait = min(RETRY_BACKOFF_S * 2 ** (attempts - 1), RETRY_BACKOFF_MAX_S)
                current[0] = attrs.evolve(
                    current[0],
                    owner=None,
                    attempts=attempts,
                    retry_after=f"{time.time() + wait:.0f}",
                )
                self.ledger.write(current[0])
                self._apply_guarded(current[0], {}, [], problems)  # its devices stay taken
                return
            with self.ledger.transaction():
                self._free_applied(record.key, problems)
                self.ledger.remove(*record.key)

        driver = WorkloadLifecycle.resume(
            record.agent_id,
            record.workload,
            hooks,
            release=release,
            on_phase=on_phase,
            on_start=on_start,
            allocation=record.allocation,
            notify=self.notify,
            hook_timeout=self.hook_timeout,
        )
        drivers.append(driver)
        try:
            await driver.post_terminate()
        except AccelkitError as exc:
            errors.append(str(exc))
        unfinished = tuple(driver.unfinished)
        freed = not unfinished or force
        return TornDown(
            record.agent_id, record.workload.id, tuple(done), tuple(errors), unfinished, freed
        )


def _short(exc: BaseException, limit: int = 200) -> str:
    text = str(exc)
    return text if len(text) <= limit else text[:limit] + "..."
