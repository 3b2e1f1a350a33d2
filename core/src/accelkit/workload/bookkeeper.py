"""A host's allocations kept in step with the node's ledger, across accelkit processes.

Every change goes through the ledger lock: :meth:`Bookkeeper.book` reads the ledger, brings the
maps in step with it (applying other processes' live records, finishing dead ones), allocates
and writes the new record before releasing the lock, so two processes on one node can never
book the same device. :meth:`Bookkeeper.release` frees and removes a record under the lock.

The ledger lock keeps other processes out but not other coroutines of this one (it is held by
the event loop's thread, which runs them all): :meth:`~Bookkeeper.book` and
:meth:`~Bookkeeper.reconcile` also hold an :class:`asyncio.Lock`, so a sync that awaits the
teardown of a dead workload never interleaves with another sync of the same bookkeeper.

There is one bookkeeper per process: :class:`accelkit.node.Node` makes it and reconciles once on
open. Agent programs use the node (``async with Node.open(config) as node:``), never a second
bookkeeper, which would apply every live record to the maps a second time.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Protocol

from accelkit.allocmap import AffinityPolicy
from accelkit.calls import DEFAULT_HOOK_TIMEOUT
from accelkit.errors import InvalidResourceArgument
from accelkit.events import WorkloadEvent, WorkloadPhase
from accelkit.runtime.base import Runtime, WorkloadHandle
from accelkit.types import AgentId, DeviceName, SlotName, Workload
from accelkit.workload.ledger import Ledger
from accelkit.workload.lifecycle import HookTarget, PhaseListener, WorkloadLifecycle
from accelkit.workload.liveness import ProcessStamp
from accelkit.workload.reconcile import Reconciler, ReconcileReport, RecordKey
from accelkit.workload.record import LedgerRecord

if TYPE_CHECKING:
    from accelkit.host import AgentView


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
    ) -> None:
        self.ledger = ledger
        self.host = host
        self.runtimes: Mapping[str, Runtime] = runtimes if runtimes is not None else {}
        self.hook_timeout = hook_timeout
        self.owner = owner if owner is not None else ProcessStamp.of(os.getpid())
        self.notify = notify
        self.reconciler = Reconciler(ledger, host.agents, notify=notify)
        #: held for each whole sync (and booking): coroutines of one process take turns
        self._syncing = asyncio.Lock()
        #: the records of the workloads this bookkeeper manages
        self.owned: dict[RecordKey, LedgerRecord] = {}
        self.last_report = ReconcileReport()

    async def reconcile(self) -> ReconcileReport:
        """Bring the maps in step with the ledger; see :mod:`accelkit.workload.reconcile`."""
        async with self._syncing:
            with self.ledger.locked():
                self.last_report = await self.reconciler.sync(self.ledger.scan(), self.owned)
            return self.last_report

    async def book(
        self,
        agent_id: AgentId,
        workload: Workload,
        slots: Mapping[SlotName, Decimal],
        *,
        leader: ProcessStamp | None = None,
        affinity_policy: AffinityPolicy | str | None = None,
    ) -> LedgerRecord:
        """Allocate ``slots`` to a new workload and record it; atomic across processes.

        Raises what the agent's ``allocate`` raises (``InsufficientResource`` …), with nothing
        booked, and ``InvalidResourceArgument`` for an unknown agent or a workload id in use.
        """
        agent = self._agent(agent_id)
        async with self._syncing:
            with self.ledger.locked():
                self.last_report = await self.reconciler.sync(self.ledger.scan(), self.owned)
                key = (agent_id, workload.id)
                if key in self.owned or self.ledger.path_of(*key).exists():
                    msg = f"agent {agent_id!r} already has a workload {workload.id!r}"
                    raise InvalidResourceArgument(msg)
                allocation = agent.allocate(slots, affinity_policy=affinity_policy)
                order = tuple(k for k in agent.contexts if k in allocation)
                record = LedgerRecord(
                    agent_id, workload, allocation, order, owner=self.owner, leader=leader
                )
                try:
                    self.ledger.write(record)
                except BaseException:
                    agent.free(allocation)
                    raise
                self.owned[key] = record
                return record

    def lifecycle(
        self, record: LedgerRecord, *, on_phase: PhaseListener | None = None
    ) -> WorkloadLifecycle:
        """The driver of a booked workload: each phase is recorded, release frees and forgets."""
        agent = self._agent(record.agent_id)
        targets = [
            HookTarget(key, agent.contexts[key], record.allocation[key]) for key in record.order
        ]

        def recorded(plugin: DeviceName, phase: WorkloadPhase) -> None:
            self.note_phase(record.key, plugin, phase)
            if on_phase is not None:
                on_phase(plugin, phase)

        return WorkloadLifecycle(
            record.agent_id,
            record.workload,
            targets,
            release=lambda: self.release(record.key),
            on_phase=recorded,
            notify=self.notify,
        )

    def note_phase(self, key: RecordKey, plugin: DeviceName, phase: WorkloadPhase) -> None:
        """Record that ``plugin``'s hook completed ``phase``."""
        self._update(key, self.owned[key].with_phase(plugin, phase))

    def set_leader(self, key: RecordKey, leader: ProcessStamp | None) -> None:
        """Record the workload's leader process."""
        self._update(key, self.owned[key].with_leader(leader))

    def set_handle(self, key: RecordKey, handle: WorkloadHandle | None) -> None:
        """Record what identifies the workload in its runtime."""
        self._update(key, self.owned[key].with_handle(handle))

    def release(self, key: RecordKey) -> None:
        """Free a booked workload's allocation and remove its record."""
        with self.ledger.locked():
            record = self.owned.pop(key)
            try:
                self._agent(record.agent_id).free(record.allocation)
            finally:
                self.ledger.remove(*key)

    def _update(self, key: RecordKey, record: LedgerRecord) -> None:
        with self.ledger.locked():
            self.ledger.write(record)
            self.owned[key] = record

    def _agent(self, agent_id: AgentId) -> AgentView:
        agent = self.host.agents.get(agent_id)
        if agent is None:
            known = ", ".join(sorted(self.host.agents)) or "none"
            msg = f"unknown agent {agent_id!r} (agents: {known})"
            raise InvalidResourceArgument(msg)
        return agent
