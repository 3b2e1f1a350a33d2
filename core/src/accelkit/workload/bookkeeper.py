"""A host's allocations kept in step with the node's ledger, across accelkit processes.

Every booking is one ledger transaction (``BEGIN IMMEDIATE``, the lock between processes):
:meth:`Bookkeeper.book` reads what changed in the ledger since this process last looked (applying
other processes' new records, freeing the ones they removed), allocates and writes the new
record before the transaction ends, so two processes on one node can never book the same device.
No liveness is checked there, so booking costs the same with 10 or 2,000 live workloads; the
full reconciliation (:meth:`Bookkeeper.reconcile`), which asks whether each workload still lives
and finishes the teardown of the dead ones, runs when the node opens, for ``status`` and
``release``, and when an allocation fails for lack of room (the allocation is then tried once
more). A refusal names who holds the devices (the ledger's device index).

The transaction keeps other processes out but not other coroutines of this one: each sync also
holds an :class:`asyncio.Lock`. Dead workloads are *claimed* in the transaction (the record gets
this process as its owner, so no other process finishes it too) and their hooks run after it,
each under the hook time limit: a hung ``post_terminate`` never holds the ledger or this
process's other bookings.

There is one bookkeeper per process: :class:`accelkit.node.Node` makes it and reconciles once on
open. Agent programs use the node (``async with Node.open(config) as node:``), never a second
bookkeeper, which would apply every live record to the maps a second time.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Protocol

import attrs

from accelkit.allocmap import AffinityPolicy
from accelkit.calls import DEFAULT_CALL_TIMEOUT, DEFAULT_HOOK_TIMEOUT
from accelkit.errors import InsufficientResource, InvalidResourceArgument, UnknownAgent
from accelkit.events import WorkloadEvent, WorkloadPhase
from accelkit.runtime.base import Runtime, WorkloadHandle
from accelkit.runtime.process_stamp import ProcessStamp
from accelkit.types import (
    AgentId,
    DeviceAllocation,
    DeviceName,
    SlotName,
    Workload,
    WorkloadType,
)
from accelkit.workload import stopping
from accelkit.workload.holders import naming_holders
from accelkit.workload.ledger import Ledger, LedgerScan
from accelkit.workload.ledger_peek import catch_up_early
from accelkit.workload.liveness import Liveness
from accelkit.workload.node_wide import NodeWideAgents
from accelkit.workload.reconcile import Reconciler
from accelkit.workload.reconcile_report import ReconcileReport, RecordKey, TornDown, merged
from accelkit.workload.record import LedgerRecord

if TYPE_CHECKING:  # status and release are imported by the operators' commands only
    from accelkit.host import AgentView
    from accelkit.workload.lifecycle import PhaseListener, WorkloadLifecycle
    from accelkit.workload.status import ReleaseReport, WorkloadStatus


def _in_use(key: RecordKey) -> InvalidResourceArgument:
    return InvalidResourceArgument(f"agent {key[0]!r} already has a workload {key[1]!r}")


class AgentsHost(Protocol):
    """What the bookkeeper needs of a partition host."""

    @property
    def agents(self) -> Mapping[AgentId, AgentView]: ...


class Bookkeeper:
    """Books, tracks and releases the workloads of one process on a host."""

    def __init__(
        self,
        ledger: Ledger,
        host: AgentsHost,
        *,
        owner: ProcessStamp | None = None,
        notify: Callable[[WorkloadEvent], None] | None = None,
        runtimes: Mapping[str, Runtime] | None = None,
        hook_timeout: Decimal = DEFAULT_HOOK_TIMEOUT,
        call_timeout: Decimal = DEFAULT_CALL_TIMEOUT,
    ) -> None:
        self.ledger = ledger
        self.host = host
        self.runtimes: Mapping[str, Runtime] = runtimes if runtimes is not None else {}
        self.hook_timeout = hook_timeout
        self.call_timeout = call_timeout
        self.owner = owner if owner is not None else ProcessStamp.of(os.getpid())
        self.notify = notify
        self.reconciler = Reconciler(
            ledger,
            NodeWideAgents(host.agents),  # records of another partition hold devices too
            notify=notify,
            runtimes=self.runtimes,
            hook_timeout=hook_timeout,
            call_timeout=call_timeout,
        )
        #: held for each whole sync (and booking): coroutines of one process take turns
        self._syncing = asyncio.Lock()
        #: the records of the workloads this bookkeeper manages
        self.owned: dict[RecordKey, LedgerRecord] = {}
        #: bookings whose handle is recorded next (a run's): pre_create's result goes with it
        self.handle_next: set[RecordKey] = set()
        #: dead workloads this process claimed and is finishing
        self._finishing: set[RecordKey] = set()
        #: the ledger's change counter at the last sync (-1: never synced)
        self._seq = -1
        self.last_report = ReconcileReport()
        #: what the last full reconciliation judged: the records, their liveness, the counter
        self.judged: tuple[LedgerScan, dict[RecordKey, Liveness]] | None = None

    # -- syncing -------------------------------------------------------------------------------

    async def reconcile(self) -> ReconcileReport:
        """The full sync: every record's liveness; dead workloads claimed and finished.

        See :mod:`accelkit.workload.reconcile`. The teardowns of dead workloads run after the
        ledger transaction, side by side, each hook under the hook time limit.
        """
        now = time.time()
        async with self._syncing:
            skip = frozenset(self._finishing)
            judged = self.ledger.scan()
            # liveness is asked outside the transaction: runtimes may be slow to answer
            states, judging = await self.reconciler.judge(judged.records, skip | set(self.owned))
            with self.ledger.transaction():
                scan = self._rescan(judged)
                # a record changed since it was judged was written by a live process
                states = {k: v for k, v in states.items() if _same(scan.records.get(k), judged, k)}
                report, dead = self.reconciler.sync_judged(scan, states, self.owned, skip)
                self.judged = (scan, states)
                report = attrs.evolve(report, problems=(*judging, *report.problems))
                due = [r for r in dead if r.retry_after is None or float(r.retry_after) <= now]
                claimed = [self._claim(r) for r in due]
                waiting = {r.key: r for r in dead if r not in due}  # devices stay taken
                kept = self.reconciler.apply_changes(waiting, (), self.owned, retry=False)
                report = merged(report, kept)
        deferred = [
            f"the teardown of dead workload {r.workload.id!r} is unfinished "
            f"({', '.join(r.unfinished()) or 'post_terminate'}); tried again after "
            f"{time.strftime('%H:%M:%S', time.localtime(float(r.retry_after or 0)))}"
            for r in dead
            if r not in due
        ]
        problems = [*report.problems, *deferred]
        results = await asyncio.gather(*(self._finish(r, problems) for r in claimed))
        torn = tuple(t for t in results if t is not None)
        self.last_report = attrs.evolve(report, torn_down=torn, problems=tuple(problems))
        return self.last_report

    def containers_unknown(self) -> bool:
        """Whether the last full reconciliation left a container it could not account for:
        a container record without its container's id (accelkit stopped between creating
        and recording it) or whose runtime could not tell, or an unreadable record set aside
        (it may have named one). ``True`` before any full reconciliation."""
        if self.judged is None:
            return True
        scan, states = self.judged
        return bool(scan.set_aside) or any(
            record.workload.type is WorkloadType.CONTAINER
            and (record.handle is None or states.get(key) is Liveness.UNKNOWN)
            for key, record in scan.records.items()
        )

    def _rescan(self, judged: LedgerScan) -> LedgerScan:
        """The ledger now (in the caller's transaction), from ``judged`` and what changed since.

        A record written since ``judged`` replaces the judged one (and, having no liveness
        from :meth:`Reconciler.judge`, is applied as live: a live process just wrote it).
        """
        changes = self.ledger.changes(judged.seq)
        if not changes.complete:
            scan = self.ledger.scan()
        else:
            records = {k: r for k, r in judged.records.items() if k not in changes.removed}
            records.update(changes.records)
            scan = LedgerScan(records, (*judged.set_aside, *changes.set_aside), changes.seq)
        self._seq = scan.seq
        return scan

    def _claim(self, record: LedgerRecord) -> LedgerRecord:
        """Make a dead record ours (in the transaction): no other process finishes it too."""
        claimed = attrs.evolve(record, owner=self.owner)
        self.ledger.write(claimed)
        self._finishing.add(record.key)
        return claimed

    async def _finish(
        self, record: LedgerRecord, problems: list[str], *, force: bool = False
    ) -> TornDown | None:
        try:
            return await self.reconciler.finish(
                record, problems, force=force, stop=self._stopper(record, 0.0)
            )
        except Exception as exc:  # one record's failure never stops the others
            problems.append(
                f"workload {record.workload.id!r} of agent {record.agent_id!r}: cannot finish "
                f"its teardown ({type(exc).__name__}: {exc}); left it in the ledger"
            )
            return None
        finally:
            self._finishing.discard(record.key)

    def _stopper(self, record: LedgerRecord, grace: float) -> Callable[[], Awaitable[None]] | None:
        """What ends and removes a dead record's workload (:func:`stopping.runtime_stop`)."""
        handle = self.reconciler.handle_of(record)
        return stopping.runtime_stop(handle, self.runtimes, grace, self.call_timeout)

    def _catch_up(self) -> ReconcileReport:
        """The incremental sync, in the caller's transaction: only what changed is read."""
        if self._seq >= 0:
            changes = self.ledger.changes(self._seq, ignore=self.owned)
            if changes.complete:
                self._seq = changes.seq
                report = self.reconciler.apply_changes(
                    changes.records, changes.removed, self.owned, frozenset(self._finishing)
                )
                return attrs.evolve(report, set_aside=changes.set_aside)
        scan = self.ledger.scan()
        self._seq = scan.seq
        return self.reconciler.apply_all(scan, self.owned, frozenset(self._finishing))

    # -- booking -------------------------------------------------------------------------------

    async def book(
        self,
        agent_id: AgentId,
        workload: Workload,
        slots: Mapping[SlotName, Decimal],
        *,
        leader: ProcessStamp | None = None,
        affinity_policy: AffinityPolicy | str | None = None,
        started: bool = False,
    ) -> LedgerRecord:
        """Allocate ``slots`` to a new workload and record it; atomic across processes.

        When there is no room, the full reconciliation runs (dead workloads are finished) and
        the allocation is tried once more. Raises what the agent's ``allocate`` raises
        (``InsufficientResource``, naming who holds the devices …) with nothing booked, and
        ``InvalidResourceArgument`` for an unknown agent or a workload id in use.
        ``started=True`` records the first hook's ``pre_create`` intent in the booking's
        write, synced (as :meth:`book_devices`), for a caller that runs the hooks next.
        """
        agent = self._agent(agent_id)
        full = None
        book = (agent, workload, slots, leader, affinity_policy)
        if self._seq < 0:  # never synced: judge every record once
            full = await self.reconcile()
        else:
            try:
                return await self._book_once(*book, started=started)
            except InsufficientResource:
                full = await self.reconcile()  # dead workloads finished: try once more
        try:
            return await self._book_once(*book, started=started)
        except InsufficientResource as exc:
            raise naming_holders(self.ledger, agent, exc) from None
        finally:
            self.last_report = merged(full, self.last_report)

    async def _book_once(
        self,
        agent: AgentView,
        workload: Workload,
        slots: Mapping[SlotName, Decimal],
        leader: ProcessStamp | None,
        affinity_policy: AffinityPolicy | str | None,
        *,
        started: bool,
    ) -> LedgerRecord:
        async with self._syncing:
            # others' changes applied from a snapshot first: the transaction reads the rest
            self._seq, early = catch_up_early(self.ledger, self._seq, self, self.reconciler)
            # unsynced: the first pre_create intent syncs it before any hook or workload runs
            with self.ledger.transaction(durable=started):
                self.last_report = merged(early, self._catch_up())
                key = (agent.agent_id, workload.id)
                if key in self.owned:
                    raise _in_use(key)
                allocation = agent.allocate(slots, affinity_policy=affinity_policy)
                order = tuple(k for k in agent.contexts if k in allocation)
                record = LedgerRecord(
                    agent.agent_id, workload, allocation, order, owner=self.owner, leader=leader
                )
                if started and order:  # the first hook's intent: note_start finds it there
                    record = record.with_started(order[0], WorkloadPhase.PRE_CREATE)
                try:  # the write refuses a key in use (another process's, or unreadable)
                    if not self.ledger.create(record):
                        raise _in_use(key)
                except BaseException:
                    agent.free(allocation)
                    raise
                self.owned[key] = record
            self._seq = self.ledger.past_own(self._seq)  # our own writes are not read back
            return record

    async def book_devices(
        self,
        agent_id: AgentId,
        workload: Workload,
        allocation: Mapping[DeviceName, DeviceAllocation],
        *,
        handle: WorkloadHandle | None = None,
        durable: bool = True,
        started: bool = False,
    ) -> LedgerRecord:
        """Book exactly ``allocation`` (chosen elsewhere, e.g. by the kubelet) and record it with
        ``handle`` in the same write; atomic across processes.

        A device another workload holds raises ``InvalidResourceArgument`` naming it, with
        nothing booked (dead workloads are finished first and the booking tried once more).
        ``durable=False`` leaves the commit unsynced, for a caller whose next write is synced
        anyway (the intent of ``pre_create``), which makes this one durable too: a power loss
        in between undoes a booking no hook has run for. ``started=True`` records that intent
        (of the first plugin) in this write, synced, for a caller that runs the hooks next.
        """
        agent = self._agent(agent_id)
        book = (agent, workload, allocation, handle)
        durable = durable or started
        if self._seq >= 0:
            try:
                return await self._book_exact_once(*book, durable=durable, started=started)
            except InvalidResourceArgument:
                pass
        full = await self.reconcile()  # dead workloads finished: try once more
        try:
            return await self._book_exact_once(*book, durable=durable, started=started)
        finally:
            self.last_report = merged(full, self.last_report)

    async def _book_exact_once(
        self,
        agent: AgentView,
        workload: Workload,
        allocation: Mapping[DeviceName, DeviceAllocation],
        handle: WorkloadHandle | None,
        *,
        durable: bool,
        started: bool,
    ) -> LedgerRecord:
        async with self._syncing:
            with self.ledger.transaction(durable=durable):
                self.last_report = self._catch_up()
                key = (agent.agent_id, workload.id)
                if key in self.owned or self.ledger.exists(*key):
                    raise _in_use(key)
                done: list[DeviceName] = []
                try:
                    for plugin, part in allocation.items():
                        agent.contexts[plugin].alloc_map.apply_allocation(part)
                        done.append(plugin)
                    order = tuple(k for k in agent.contexts if k in allocation)
                    record = LedgerRecord(
                        agent.agent_id, workload, allocation, order, owner=self.owner, handle=handle
                    )
                    if started and order:  # the first hook's intent: note_start finds it there
                        record = record.with_started(order[0], WorkloadPhase.PRE_CREATE)
                    self.ledger.write(record)
                except BaseException:
                    for plugin in reversed(done):
                        agent.contexts[plugin].alloc_map.free(allocation[plugin])
                    raise
                self.owned[key] = record
            self._seq = self.ledger.past_own(self._seq)  # our own writes are not read back
            return record

    # -- the workloads this process manages ----------------------------------------------------

    def lifecycle(
        self,
        record: LedgerRecord,
        *,
        on_phase: PhaseListener | None = None,
        handle_next: bool = False,
    ) -> WorkloadLifecycle:
        """The driver of a booked workload: the intent and the result of every hook call are
        recorded (:mod:`.recorded_lifecycle`); release frees and forgets (or, with an
        unfinished teardown, leaves it). ``handle_next``: a handle is recorded next."""
        from accelkit.workload.recorded_lifecycle import recorded_lifecycle  # not status's

        return recorded_lifecycle(self, record, on_phase=on_phase, handle_next=handle_next)

    def note_start(self, key: RecordKey, plugin: DeviceName, phase: WorkloadPhase) -> None:
        """Record the intent: ``plugin``'s hook call for ``phase`` begins (synced for
        ``pre_create`` only: what gives a hook ``post_terminate``, whatever is lost after)."""
        durable = phase is WorkloadPhase.PRE_CREATE
        if durable and self.owned[key].was_started(plugin, phase):
            return  # recorded with the booking (book_devices started=True), synced
        self._update(key, self.owned[key].with_started(plugin, phase), durable=durable)

    def note_phase(self, key: RecordKey, plugin: DeviceName, phase: WorkloadPhase) -> None:
        """Record that ``plugin``'s hook completed ``phase``.

        Not synced to disk (``durable=False``): a power loss that undoes it leaves the intent,
        and every hook whose call began gets ``post_terminate`` again, which it must tolerate;
        the next intent or handle recorded syncs it anyway. A result goes with the record's
        next write where that follows at once (:func:`.recorded_lifecycle.result_waits`).
        """
        from accelkit.workload.recorded_lifecycle import result_waits

        record = self.owned[key].with_phase(plugin, phase)
        if result_waits(record, plugin, phase, handle_next=key in self.handle_next):
            self.owned[key] = record
        else:
            self._update(key, record, durable=False)

    def set_leader(self, key: RecordKey, leader: ProcessStamp | None) -> None:
        """Record the workload's leader process (not synced: no process survives a power loss)."""
        self._update(key, self.owned[key].with_leader(leader), durable=False)

    def set_handle(self, key: RecordKey, handle: WorkloadHandle | None) -> None:
        """Record what identifies the workload in its runtime (not synced: a container left by
        a power loss carries this ledger's label, which the orphan sweep removes)."""
        self.handle_next.discard(key)
        self._update(key, self.owned[key].with_handle(handle), durable=False)

    def release(self, key: RecordKey) -> None:
        """Free a booked workload's allocation and remove its record.

        A record whose ``post_terminate`` was started and never completed (it timed out) is not
        freed: it is given up (no owner) with its devices still taken, and a later full
        reconciliation, of this process or another, tries the hook again. Synced: the last
        write of a run, which makes every unsynced one before it durable too.
        """
        self.handle_next.discard(key)
        with self.ledger.transaction():
            record = self.owned.pop(key)
            if record.pending_teardown():
                given_up = attrs.evolve(
                    record, owner=None, leader=None, retry_after=str(int(time.time()))
                )
                self.ledger.write(given_up)
                self.reconciler.hold(given_up)
            else:
                try:
                    self._agent(record.agent_id).free(record.allocation)
                finally:
                    self.ledger.remove(*key)
        self._seq = self.ledger.past_own(self._seq)

    def hand_over(self, key: RecordKey) -> LedgerRecord:
        """Stop managing a booked workload whose liveness its runtime answers (the handle):
        its record loses its owner and keeps its devices, and whichever accelkit process finds
        it dead in a full reconciliation finishes its teardown and frees it (a pod the
        kubelet runs outlives the bridge that booked it). Not synced to disk: a power loss that
        undoes it leaves the record owned by a process that is gone, which reconciliation then
        judges through the same handle."""
        with self.ledger.transaction(durable=False):
            record = self.owned.pop(key)
            given = attrs.evolve(record, owner=None)
            self.ledger.write(given, same=True)
            self.reconciler.hold(given)
            return given

    def _update(self, key: RecordKey, record: LedgerRecord, *, durable: bool = True) -> None:
        same = key in self.owned and self.owned[key].allocation == record.allocation
        self.ledger.write(record, durable=durable, same=same)
        self.owned[key] = record

    def _agent(self, agent_id: AgentId) -> AgentView:
        return UnknownAgent.look_up(self.host.agents, agent_id)

    # -- operators: status and release ---------------------------------------------------------

    async def status(self, *, reconcile: bool = True) -> list[WorkloadStatus]:
        """Every workload of the ledger (:func:`~accelkit.workload.operator_status.statuses`)."""
        from accelkit.workload import operator_status

        return await operator_status.statuses(self, reconcile=reconcile)

    async def release_workload(
        self,
        workload_id: str,
        *,
        agent: AgentId | None = None,
        force: bool = False,
        grace: float = 5.0,
        on_skip: Callable[[str], None] | None = None,
    ) -> ReleaseReport:
        """Stop a workload, finish its teardown and free it (``Node.release`` documents it)."""
        from accelkit.workload import operator_release

        return await operator_release.release_workload(
            self, workload_id, agent=agent, force=force, grace=grace, on_skip=on_skip
        )


def _same(now: LedgerRecord | None, judged: LedgerScan, key: RecordKey) -> bool:
    """Whether the record under ``key`` is still the one judged (most often the same object:
    nothing rewrote it since; comparing field by field is for those read again)."""
    before = judged.records[key]
    return now is before or now == before
