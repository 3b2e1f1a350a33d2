"""What the workload runner needs of the node: a narrow interface, not the ``Node``.

The runner sits a layer below the node (DESIGN §18 "§1 Layers"): it books, drives the
lifecycle, records the handle and asks for the ledger's identity through this ``Protocol``,
which :class:`accelkit.node.Node` satisfies, as the kubelet's device manager offers the rest
of the kubelet a small ``Manager`` interface rather than itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from accelkit.allocmap import AffinityPolicy
    from accelkit.config.model import HostConfig
    from accelkit.host import PartitionHost
    from accelkit.runtime.base import Runtime, WorkloadHandle
    from accelkit.runtime.process_stamp import ProcessStamp
    from accelkit.types import AgentId, SlotName, Workload
    from accelkit.workload.bookkeeper import Bookkeeper
    from accelkit.workload.lifecycle import PhaseListener, WorkloadLifecycle
    from accelkit.workload.reconcile_report import ReconcileReport, RecordKey
    from accelkit.workload.record import LedgerRecord

__all__ = ["RunNode"]


class RunNode(Protocol):
    """The node as the runner of one workload uses it."""

    @property
    def config(self) -> HostConfig:
        """The host config the node was opened with (pids, hook timeouts, state dir)."""

    @property
    def host(self) -> PartitionHost:
        """The partition host, for the plugins a teardown asks."""

    @property
    def runtimes(self) -> Mapping[str, Runtime]:
        """The registered runtimes, by name."""

    @property
    def bookkeeper(self) -> Bookkeeper:
        """The ledger's bookkeeper, to keep a booking whose runtime cannot be reached."""

    @property
    def last_report(self) -> ReconcileReport:
        """What the reconciliation before the booking found."""

    async def book(
        self,
        agent_id: AgentId,
        workload: Workload,
        slots: Mapping[SlotName, Decimal],
        *,
        affinity_policy: AffinityPolicy | str | None = None,
        leader: ProcessStamp | None = None,
        started: bool = False,
    ) -> LedgerRecord:
        """Allocate ``slots`` to a new workload and record it (``started``: with the first
        hook's intent)."""

    def lifecycle(
        self,
        record: LedgerRecord,
        *,
        on_phase: PhaseListener | None = None,
        handle_next: bool = False,
    ) -> WorkloadLifecycle:
        """The lifecycle driver of a booked workload (``handle_next``: a handle follows)."""

    def record_handle(self, key: RecordKey, handle: WorkloadHandle | None) -> None:
        """Record what identifies the workload in its runtime."""

    def ledger_id_for(self, runtime: Runtime) -> str:
        """The ledger's identity, for the labels of what ``runtime`` creates."""
