"""The node: one partition host and one ledger bookkeeper per process, plus the runtimes.

``async with Node.open(config) as node:`` starts the host (plugins, devices, agents), opens the
allocation ledger of ``state-dir`` and reconciles once: the allocations of live workloads are
applied to the agents' maps, dead workloads' teardown is finished, double bookings are reported
(:attr:`Node.last_report`, :attr:`Node.warnings`). Everything that books, runs or releases a
workload goes through the node, so each record is applied to this process's maps exactly once.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from types import TracebackType
from typing import TYPE_CHECKING

import attrs

from accelkit.allocmap import AffinityPolicy
from accelkit.config.model import HostConfig
from accelkit.discovery import PluginLoader
from accelkit.errors import ConfigError
from accelkit.host import AgentView, PartitionHost
from accelkit.node.health_board import HealthBoard
from accelkit.node.health_cordons import CordonFile
from accelkit.node.health_keeper import HealthKeeper
from accelkit.node.held_devices import partition_notes
from accelkit.runtime.base import Runtime, WorkloadHandle
from accelkit.runtime.process_stamp import ProcessStamp
from accelkit.runtime.registry import RuntimesByName, installed_runtimes_by_name
from accelkit.types import AgentId, SlotName, Workload
from accelkit.workload.bookkeeper import Bookkeeper
from accelkit.workload.ledger import Ledger
from accelkit.workload.reconcile_report import ReconcileReport, RecordKey
from accelkit.workload.record import LedgerRecord

if TYPE_CHECKING:  # imported by the commands that rediscover, sweep, ask statuses, release
    from accelkit.node.rediscovery import Rediscoverer, RediscoveryReport
    from accelkit.runtime.docker import DockerRuntime
    from accelkit.workload.lifecycle import PhaseListener, WorkloadLifecycle
    from accelkit.workload.orphans import SweepReport
    from accelkit.workload.status import ReleaseReport, WorkloadStatus

__all__ = ["Node"]

log = logging.getLogger(__name__)

Checkpoint = Callable[[str], None]
Echo = Callable[[str], None]


def _no_checkpoint(_name: str) -> None:
    return None


class Node:
    """A started partition host with its ledger's bookkeeper; see the module docstring."""

    def __init__(
        self,
        config: HostConfig,
        *,
        loader: PluginLoader | None = None,
        runtimes: Mapping[str, Runtime] | None = None,
        sweep: bool | None = True,
    ) -> None:
        self.config = config
        self._sweep = sweep
        self.host = PartitionHost(config, loader)
        self._own_runtimes = runtimes is None
        #: by name; without ``runtimes``, every registered runtime, known when the node starts
        #: (accelkit's own built on first use, :func:`installed_runtimes_by_name`)
        #: (a mapping given is used as it is: one that builds its runtimes on first use does)
        self.runtimes: Mapping[str, Runtime] = {} if runtimes is None else runtimes
        self._bookkeeper: Bookkeeper | None = None
        self._health: HealthKeeper | None = None
        self._rediscoverer: Rediscoverer | None = None

    @classmethod
    def open(
        cls,
        config: HostConfig | None = None,
        *,
        loader: PluginLoader | None = None,
        runtimes: Mapping[str, Runtime] | None = None,
        sweep: bool | None = True,
    ) -> Node:
        """A node for ``config``; nothing starts until it is entered (``async with``).

        ``loader`` replaces entry-point discovery (plugins registered by a test); ``runtimes``
        replaces the registered ones (:mod:`accelkit.runtime.registry`; a node given runtimes
        does not close them). ``sweep=False`` leaves the orphan container sweep out of the opening
        reconciliation (a process-runtime ``accelkit run`` need not ask the container engines;
        the next ``status``, ``release`` or ``serve`` sweeps); ``sweep=None`` sweeps only when
        the reconciliation could not account for a container record (one without its
        container's id, one whose engine could not tell, an unreadable record set aside), as
        a docker run does: a container of this ledger that no record names otherwise comes
        from a forced release or a crash, which the next ``status`` or ``serve`` sweeps.
        """
        return cls(config or HostConfig(), loader=loader, runtimes=runtimes, sweep=sweep)

    async def __aenter__(self) -> Node:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def start(self) -> None:
        """Start the host, open the ledger and reconcile it once."""
        await self.host.start()
        try:
            if self._own_runtimes:
                loader = self.host.loader
                self.runtimes = installed_runtimes_by_name(
                    loader.pm, timeout=self.config.plugins.call_timeout, warn=loader.note
                )
            ledger = Ledger(self.config.resource.state_dir, source=self.config.source_name)
            self._bookkeeper = Bookkeeper(
                ledger,
                self.host,
                notify=self.host.loader.notify_workload_event,
                runtimes=self.runtimes,
                hook_timeout=self.config.plugins.hook_timeout,
                call_timeout=self.config.plugins.call_timeout,
            )
            report = await self._bookkeeper.reconcile()
            if self._sweep or (self._sweep is None and self._bookkeeper.containers_unknown()):
                report = await self._swept(report)
            report = self._noting_partition(report)
            await self._start_health()
        except BaseException:
            await self.close()
            raise
        for line in report.messages():
            log.warning("%s", line)
            if not report.clean:
                self.host.add_warning(line)

    def _noting_partition(self, report: ReconcileReport) -> ReconcileReport:
        """``report`` with what :func:`partition_notes` says (another config, devices held
        under another partition); it becomes :attr:`last_report`."""
        judged = {} if self.bookkeeper.judged is None else self.bookkeeper.judged[0].records
        live = {k: judged[k] for k in report.kept if k in judged}
        notes = partition_notes(self.bookkeeper.ledger, self.host, live)
        if notes:
            report = attrs.evolve(report, problems=(*report.problems, *notes))
            self.bookkeeper.last_report = report
        return report

    async def close(self) -> None:
        """Close the ledger, the runtimes the node made, and the host."""
        try:
            if self._bookkeeper is not None:
                self._bookkeeper.ledger.close()
            if self._own_runtimes:
                made = self.runtimes
                for runtime in made.built() if isinstance(made, RuntimesByName) else made.values():
                    try:
                        await runtime.close()
                    except Exception:
                        log.warning("closing runtime %r failed", runtime.name, exc_info=True)
        finally:
            await self.host.close()

    # -- what the node holds ---------------------------------------------------------------------

    @property
    def bookkeeper(self) -> Bookkeeper:
        """The process's one bookkeeper of the ledger."""
        if self._bookkeeper is None:
            msg = "the node is not started (use 'async with Node.open(config) as node:')"
            raise RuntimeError(msg)
        return self._bookkeeper

    @property
    def agents(self) -> Mapping[AgentId, AgentView]:
        """The agents' views of the node."""
        return self.host.agents

    @property
    def last_report(self) -> ReconcileReport:
        """What the last reconciliation (on open, or before a booking) found and did."""
        return self.bookkeeper.last_report

    @property
    def warnings(self) -> list[str]:
        """The plan's warnings and what reconciling the ledger found."""
        return self.host.warnings

    # -- workloads ---------------------------------------------------------------------------------

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
        """Allocate ``slots`` to a new workload and record it, atomically across processes.

        Raises ``InsufficientResource`` (naming who holds the devices) with nothing booked,
        ``InvalidResourceArgument`` for an unknown agent or a workload id already in use.
        ``started=True``: the hooks run next, the first one's intent goes with the booking.
        """
        self.health_keeper.sync_cordons()  # one stat unless another process changed them
        return await self.bookkeeper.book(
            agent_id,
            workload,
            slots,
            leader=leader,
            affinity_policy=affinity_policy,
            started=started,
        )

    def lifecycle(
        self,
        record: LedgerRecord,
        *,
        on_phase: PhaseListener | None = None,
        handle_next: bool = False,
    ) -> WorkloadLifecycle:
        """The lifecycle driver of a booked workload; each hook call is recorded
        (``handle_next``: the caller records a handle once it is prepared)."""
        return self.bookkeeper.lifecycle(record, on_phase=on_phase, handle_next=handle_next)

    def record_handle(self, key: RecordKey, handle: WorkloadHandle | None) -> None:
        """Record what identifies the workload in its runtime (liveness, release use it)."""
        self.bookkeeper.set_handle(key, handle)

    def set_leader(self, key: RecordKey, stamp: ProcessStamp | None) -> None:
        """Record the workload's leader process."""
        self.bookkeeper.set_leader(key, stamp)

    async def status(self, *, reconcile: bool = True) -> list[WorkloadStatus]:
        """Every workload of the ledger, after a full reconciliation (dead ones finished, orphan
        containers removed).

        ``reconcile=False`` takes the opening reconciliation (the last full one) as it is,
        with what changed in the ledger since: a command that has just opened the node reads
        the ledger and asks each workload's liveness once, not twice.
        """
        found = await self.bookkeeper.status(reconcile=reconcile)
        if reconcile:
            await self._swept(self.bookkeeper.last_report)
        return found

    # -- orphan containers (accelkit.workload.orphans) ---------------------------------------

    def _docker(self) -> DockerRuntime | None:
        """A docker runtime of the node: the sweep asks the engines the ledger noted through it."""
        from accelkit.runtime.docker import DockerRuntime

        return next((r for r in self.runtimes.values() if isinstance(r, DockerRuntime)), None)

    def ledger_id_for(self, runtime: Runtime) -> str:
        """The ledger's identity, for the labels of what ``runtime`` is about to create.

        For the docker runtime its engine is noted in the ledger first, so that the orphan
        sweep knows to look there (a ledger that never ran a container asks no engine).
        """
        ledger = self.bookkeeper.ledger
        # a docker runtime exists only once its module was imported: a process run imports none
        docker = sys.modules.get("accelkit.runtime.docker")
        if docker is not None and isinstance(runtime, docker.DockerRuntime):
            from accelkit.workload.container_engines import note_container_engine

            note_container_engine(ledger, runtime.url)
        return ledger.ledger_id

    async def sweep_orphans(
        self, *, grace: float | None = None, min_age: float | None = None
    ) -> SweepReport:
        """Stop and remove the containers labelled with this ledger's identity that no record
        names, on every engine this ledger's containers were made on.

        Part of every full reconciliation of the node (on open, for :meth:`status`); see
        :func:`accelkit.workload.orphans.sweep_orphans` for ``grace`` and ``min_age``. An
        engine that cannot be reached is a problem in the report, never an error.
        """
        from accelkit.workload.container_engines import container_engines
        from accelkit.workload.orphans import SweepReport, sweep_orphans

        if not container_engines(self.bookkeeper.ledger):
            return SweepReport()  # no container was made: no runtime need be asked or built
        docker = self._docker()
        if docker is None:
            return SweepReport()
        return await sweep_orphans(self.bookkeeper.ledger, docker, grace=grace, min_age=min_age)

    async def _swept(self, report: ReconcileReport) -> ReconcileReport:
        """``report`` with what the orphan sweep did; it becomes :attr:`last_report`.

        The sweep never stops the node: a failure of its own is one more problem reported.
        """
        from accelkit.workload.container_engines import container_engines

        try:
            if not container_engines(self.bookkeeper.ledger):
                return report  # no container was made: the sweep's module is not even imported
            swept = await self.sweep_orphans()
        except ConfigError:
            raise  # the ledger itself cannot be used: reconciling would have failed too
        except Exception as exc:
            log.warning("the orphan container sweep failed", exc_info=True)
            from accelkit.workload.orphans import SweepReport

            swept = SweepReport(
                problems=(f"the orphan container sweep failed: {type(exc).__name__}: {exc}",)
            )
        if swept.removed or swept.problems:
            report = attrs.evolve(
                report,
                orphans=(*report.orphans, *swept.removed),
                problems=(*report.problems, *swept.problems),
            )
            self.bookkeeper.last_report = report
        for name in swept.too_young:
            log.info("container %s has no ledger record yet; it is too young to be swept", name)
        return report

    async def release(
        self,
        workload_id: str,
        *,
        agent: AgentId | None = None,
        force: bool = False,
        grace: float = 5.0,
        on_skip: Callable[[str], None] | None = None,
    ) -> ReleaseReport:
        """Stop a workload, finish its teardown and free its allocation.

        A live workload is stopped through its runtime with ``grace`` seconds between SIGTERM
        and SIGKILL (or, when an accelkit process runs it, that process is asked to end it and
        tear it down). ``force`` frees a record whose workload cannot be reached, and one whose
        ``post_terminate`` hangs; ``on_skip(what)`` is told of each thing skipped before it is,
        and the report lists them. Raises
        ``InvalidResourceArgument`` when no record (or more than one: pass ``agent``) matches,
        ``WorkloadError`` when the workload cannot be stopped or torn down without ``force``.
        """
        return await self.bookkeeper.release_workload(
            workload_id, agent=agent, force=force, grace=grace, on_skip=on_skip
        )

    async def run(
        self,
        agent_id: AgentId,
        slots: Mapping[SlotName, Decimal],
        argv: Sequence[str],
        *,
        runtime: str = "process",
        image: str | None = None,
        grace: float = 5.0,
        no_memory_limit: bool = False,
        checkpoint: Checkpoint = _no_checkpoint,
        echo: Echo | None = None,
        pids: int | None = None,
    ) -> int:
        """Run ``argv`` as a workload of ``runtime`` through the whole lifecycle; its exit status.

        See :func:`accelkit.workload.runner.run_workload`; ``InvalidResourceArgument`` for an
        unknown runtime, ``RuntimeUnavailable`` when it cannot contain the workload. ``pids``
        is its ``pids.max`` (default: the agent's or the node's ``pids``).
        """
        from accelkit.workload.runner import run_workload  # only runs need the runner

        return await run_workload(
            self,
            agent_id,
            slots,
            argv,
            runtime=runtime,
            image=image,
            grace=grace,
            no_memory_limit=no_memory_limit,
            checkpoint=checkpoint,
            echo=echo if echo is not None else (lambda _line: None),
            pids=pids,
        )

    # -- device health (DESIGN §15) ------------------------------------------------------------

    async def _start_health(self) -> None:
        cordons = CordonFile(self.config.resource.state_dir, source=self.config.source_name)
        self._health = HealthKeeper(
            self.host,
            cordons,
            ledger=lambda: self.bookkeeper.ledger,
            notify=self.host.loader.notify_workload_event,
            call_timeout=self.config.plugins.call_timeout,
        )
        self._health.prepare()
        await self._health.refresh()

    @property
    def health_keeper(self) -> HealthKeeper:
        """What keeps the maps in step with the devices' health: ``refresh()``, ``watching()``,
        ``cordon(plugin, device, reason)``, ``uncordon(plugin, device)``."""
        if self._health is None:
            msg = "the node is not started (use 'async with Node.open(config) as node:')"
            raise RuntimeError(msg)
        return self._health

    @property
    def health(self) -> HealthBoard:
        """Every device's effective health and its changes (:class:`HealthBoard`)."""
        return self.health_keeper.board

    # -- live rediscovery (DESIGN §15) ------------------------------------------------------------

    async def rediscover(self) -> RediscoveryReport:
        """Ask every plugin for its devices again (under call-timeout) and apply what changed.

        New devices join the maps in SHARED mode (or with one agent) and wait unassigned in
        the split modes; vanished ones are cordoned, their holders keep them and are told;
        the board publishes ``"added"`` / ``"removed"`` changes. See
        :mod:`accelkit.node.rediscovery`.
        """
        if self._rediscoverer is None:
            from accelkit.node.rediscovery import Rediscoverer

            self._rediscoverer = Rediscoverer(
                self.host,
                self.health_keeper,
                ledger=lambda: self.bookkeeper.ledger,
                call_timeout=self.config.plugins.call_timeout,
                state_dir=self.config.resource.state_dir,
                source=self.config.source_name,
            )
        return await self._rediscoverer.rediscover()
