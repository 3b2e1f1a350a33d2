"""Running a command as a workload of a runtime through the whole lifecycle (DESIGN §9, §14).

The order: ``runtime.new_workload`` → ``node.book`` → the hooks' ``pre_create`` →
``runtime.create`` (the handle is recorded in the ledger before anything of the user's runs) →
``runtime.start`` → ``post_create`` → ``runtime.wait`` → ``pre_terminate`` →
``runtime.stop(grace)`` → ``post_terminate`` → release.

Each step is announced to ``checkpoint(name)`` (the crash tests' launcher pauses the command
at one of them): ``booked``, ``pre_create:<plugin>`` per hook, ``prepared``, ``created``,
``spawned`` (the command runs), ``post_create:<plugin>``, ``running``, ``exited``,
``pre_terminate:<plugin>``, ``post_terminate:<plugin>``, ``released``.

Signals (:mod:`.signals`): SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to every process of
the workload once it runs; ``grace`` seconds later whatever is left gets SIGKILL, and a second
SIGINT or SIGTERM kills at once. With a terminal (``terminal=True`` and a terminal on stdin, in
its foreground) the workload gets a pseudo-terminal of its own (:mod:`.terminal`) and Ctrl-C
escalates instead: the first only reaches the workload, a second within ``grace`` sends SIGTERM
to all of it, a third SIGKILL. Before the command runs the first signal aborts the run cleanly
(status 128 + N). Once the teardown has begun nothing stops it half-way: a cancellation waits
for it to end — every hook gets its ``post_terminate``, the runtime stops the workload and the
allocation is released.

Statuses (DESIGN §18, as ``docker run``): the command's own, 128 + N when it died of signal N;
127 when it is not found, 126 when it cannot be run, 125 when accelkit could not start it.
"""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, TypeVar

import attrs

from accelkit.errors import InvalidResourceArgument, WorkloadError
from accelkit.events import WorkloadPhase
from accelkit.reprs import attrs_eq, attrs_hash, attrs_repr
from accelkit.runtime.base import LaunchSpec, Runtime, WorkloadHandle, WorkloadUnreachable
from accelkit.runtime.cgroups import V2_DEVICES_NOTE
from accelkit.runtime.process import ProcessRuntime
from accelkit.runtime.process_stamp import ProcessStamp
from accelkit.runtime.process_tree import CommandNotRunnable
from accelkit.types import (
    AgentId,
    DeviceName,
    SlotName,
    Workload,
    WorkloadConfig,
    WorkloadType,
    is_digits,
)
from accelkit.workload.device_nodes import denied_device_nodes
from accelkit.workload.kept_booking import keep_booking
from accelkit.workload.lifecycle import WorkloadLifecycle
from accelkit.workload.record import LedgerRecord
from accelkit.workload.release_notes import take_release_note
from accelkit.workload.signals import FORWARDED_SIGNALS, SignalRelay

if TYPE_CHECKING:
    from accelkit.workload.run_node import RunNode
    from accelkit.workload.terminal import Terminal

__all__ = [
    "EXIT_CANNOT_RUN",
    "EXIT_FAILED",
    "FORWARDED_SIGNALS",
    "announced_gaps",
    "run_workload",
]

Checkpoint = Callable[[str], None]
Echo = Callable[[str], None]
#: accelkit refused or failed to start the workload (``docker run``'s 125)
EXIT_FAILED = 125
#: the command was not found (its launcher reports 126 for one that cannot be run)
EXIT_CANNOT_RUN = 127
_T = TypeVar("_T")


async def _to_the_end(step: Awaitable[_T]) -> _T:
    """Await ``step`` to its end even when the caller is cancelled meanwhile.

    A cancellation received while waiting is raised once ``step`` has finished, unless ``step``
    itself failed: its error is raised then.
    """
    inner = asyncio.ensure_future(step)
    cancelled = False
    while not inner.done():
        try:
            await asyncio.wait((inner,))  # unlike awaiting it, never cancels it
        except asyncio.CancelledError:
            cancelled = True
    result = inner.result()
    if cancelled:
        raise asyncio.CancelledError
    return result


def _no_checkpoint(_name: str) -> None:
    return None


async def run_workload(
    node: RunNode,
    agent_id: AgentId,
    slots: Mapping[SlotName, Decimal],
    argv: Sequence[str],
    *,
    runtime: str = "process",
    image: str | None = None,
    grace: float = 5.0,
    no_memory_limit: bool = False,
    verbose: bool = False,
    checkpoint: Checkpoint = _no_checkpoint,
    echo: Echo = lambda _line: None,
    pids: int | None = None,
    terminal: bool = False,
) -> int:
    """Book ``slots``, run ``argv`` in ``runtime`` through every hook, tear down; its status.

    Errors of the booking or of ``pre_create`` (``InsufficientResource``,
    ``WorkloadCreationDenied`` …) and a runtime that cannot contain the workload
    (``RuntimeUnavailable``) are raised with nothing left booked. A command that is not found
    gives status 127, one that cannot be run 126, a launch that failed otherwise 125; a signal
    received before it starts, 128 + the signal number. ``pids`` is the workload's
    ``pids.max`` (default: its agent's or the node's ``pids``); ``terminal`` gives a process
    workload a terminal of its own where stdin is one (see the module docstring).
    """
    chosen = node.runtimes.get(runtime)
    if chosen is None:
        known = ", ".join(sorted(node.runtimes)) or "none"
        msg = f"unknown runtime {runtime!r} (runtimes: {known})"
        raise InvalidResourceArgument(msg)
    _check_run(argv, grace)
    if pids is not None and (isinstance(pids, bool) or not isinstance(pids, int) or pids < 1):
        msg = f"pids must be a whole number of processes, 1 or more, not {pids!r}"
        raise InvalidResourceArgument(msg)
    task = asyncio.current_task()
    if task is None:
        msg = "run_workload must run inside an asyncio task"
        raise RuntimeError(msg)
    with SignalRelay(task, grace, echo) as relay:
        limit = node.config.pids_of(agent_id) if pids is None else pids
        wants_terminal = terminal and chosen.workload_type is WorkloadType.PROCESS_TREE
        options = _Options(
            image, grace, no_memory_limit, verbose, checkpoint, echo, limit, wants_terminal
        )
        run = _Run(node, chosen, options, relay)
        try:
            return await run.run(agent_id, slots, argv)
        except asyncio.CancelledError:
            if relay.received is None:
                raise
            run.say_if_released()
            return 128 + relay.received


def _check_run(argv: Sequence[str], grace: float) -> None:
    """What no booking should be made for: a command that names no program, a bare string
    (it would run its letters), or a grace that is not a number of seconds."""
    if isinstance(argv, str | bytes) or not argv:
        msg = (
            "argv must be a non-empty sequence of strings (the program and its arguments), "
            f"not {argv!r}"
        )
        raise InvalidResourceArgument(msg)
    if not all(isinstance(arg, str) for arg in argv):
        msg = f"argv must hold strings only, got {list(argv)!r}"
        raise InvalidResourceArgument(msg)
    if isinstance(grace, bool) or not isinstance(grace, int | float) or not 0 <= grace < math.inf:
        msg = f"grace must be a finite number of seconds, 0 or more, not {grace!r}"
        raise InvalidResourceArgument(msg)


@attrs.frozen(repr=False)
class _Options:
    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    image: str | None
    grace: float
    no_memory_limit: bool
    verbose: bool
    checkpoint: Checkpoint
    echo: Echo
    pids: int | None = None
    terminal: bool = False


def _leader_of(workload: Workload) -> ProcessStamp | None:
    kind, _, pid = workload.id.partition(":")
    if workload.type is WorkloadType.PROCESS_TREE and kind == "pid" and is_digits(pid):
        return ProcessStamp.of(int(pid))
    return None


def announced_gaps(missing: str) -> str:
    """What a run warns it cannot contain (a handle's ``missing``, ``"a: why; b: why"``).

    Not cgroup v2's device isolation: that is the same on every v2 host, so ``accelkit -v run``
    and the docs say it (DESIGN §14) rather than a warning on every run.
    """
    unsaid = f"devices: {V2_DEVICES_NOTE}"
    return "; ".join(item for item in missing.split("; ") if item and item != unsaid)


def _open_terminal(echo: Echo) -> Terminal | None:
    from accelkit.workload.terminal import Terminal  # a run at a terminal's only

    try:
        return Terminal.open()
    except OSError as exc:
        echo(f"warning: no terminal for the workload: {exc.strerror or exc}")
        return None


def _devices(record: LedgerRecord) -> str:
    names = sorted(
        f"{key}:{device}"
        for key, alloc in record.allocation.items()
        for per_device in alloc.values()
        for device in per_device
    )
    return ", ".join(dict.fromkeys(names)) or "none"


@attrs.frozen(repr=False)
class _Run:
    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    node: RunNode
    runtime: Runtime
    options: _Options
    relay: SignalRelay

    async def run(
        self, agent_id: AgentId, slots: Mapping[SlotName, Decimal], argv: Sequence[str]
    ) -> int:
        echo, checkpoint = self.options.echo, self.options.checkpoint
        workload = await self.runtime.new_workload(agent_id)
        try:
            try:
                record = await self.node.book(
                    agent_id, workload, slots, leader=_leader_of(workload), started=True
                )
            finally:
                for line in self.node.last_report.messages():
                    echo(line)
            checkpoint("booked")
            echo(f"workload {workload.id} on agent {agent_id}: devices {_devices(record)}")

            def on_phase(plugin: DeviceName, phase: WorkloadPhase) -> None:
                checkpoint(f"{phase.value}:{plugin}")

            driver = self.node.lifecycle(record, on_phase=on_phase, handle_next=True)
            # the plugins' device nodes are asked while the hooks prepare, on their workers
            nodes = asyncio.ensure_future(self._denied(record))
            try:
                config = await driver.prepare()
            except BaseException:
                nodes.cancel()
                raise
        except BaseException:
            await _to_the_end(self.runtime.discard(workload, None))
            raise
        checkpoint("prepared")
        return await self.supervise(record, driver, config, argv, nodes)

    async def _denied(self, record: LedgerRecord) -> tuple[frozenset[str], list[str]]:
        timeout = self.node.config.plugins.hook_timeout
        return await denied_device_nodes(self.node.host.plugins, record.allocation, timeout)

    async def supervise(
        self,
        record: LedgerRecord,
        driver: WorkloadLifecycle,
        config: WorkloadConfig,
        argv: Sequence[str],
        nodes: Awaitable[tuple[frozenset[str], list[str]]] | None = None,
    ) -> int:
        echo, checkpoint = self.options.echo, self.options.checkpoint
        status = EXIT_FAILED
        handle: WorkloadHandle | None = None
        terminal = _open_terminal(echo) if self.options.terminal else None
        try:
            handle = await self.create(record, config, argv, terminal, nodes)
            try:
                await self.runtime.start(handle)
            except WorkloadError as exc:
                echo(f"error: {exc}")
                return exc.status if isinstance(exc, CommandNotRunnable) else EXIT_FAILED
            self.relay.running(self.runtime, handle)
            if terminal is not None:
                self.relay.terminal = terminal
                terminal.start(self.relay.interrupt)
            checkpoint("spawned")
            await driver.post_create()
            checkpoint("running")
            status = await self._wait(handle, record.workload.id)
            if terminal is not None:
                terminal.close()
            self.say_if_released()
            for note in await self.runtime.exit_notes(handle):
                echo(note)
            checkpoint("exited")
        finally:
            if terminal is not None:
                terminal.close()
            self.relay.protected = True
            await _to_the_end(self.teardown(record, handle, driver))
        checkpoint("released")
        return status

    def say_if_released(self) -> None:
        """Say who released the workload, when ``accelkit release`` did (it ended with the
        signal release sent, not only that status)."""
        if self.relay.forwarded is None and self.relay.received is None:
            return
        by = take_release_note(self.node.config.resource.state_dir)
        if by is not None:
            self.options.echo(f"the workload was released by {by}")

    async def _wait(self, handle: WorkloadHandle, workload_id: str) -> int:
        """The workload's status; a process workload whose leader exits while others of its
        processes run says so, once, and is waited for until they end too."""
        if not isinstance(self.runtime, ProcessRuntime):
            return await self.runtime.wait(handle)

        def left(status: int, pids: Sequence[int]) -> None:
            shown = ", ".join(str(pid) for pid in sorted(pids)[:5])
            more = ", …" if len(pids) > 5 else ""
            self.options.echo(
                f"the command exited with status {status} and left {len(pids)} process(es) "
                f"running (pids {shown}{more}): waiting for them to end "
                f"(Ctrl-C, or accelkit release {workload_id}, ends them)"
            )

        return await self.runtime.wait(handle, on_leftovers=left)

    async def create(
        self,
        record: LedgerRecord,
        config: WorkloadConfig,
        argv: Sequence[str],
        terminal: Terminal | None = None,
        nodes: Awaitable[tuple[frozenset[str], list[str]]] | None = None,
    ) -> WorkloadHandle:
        """Contain the workload and record its handle before anything of the user's runs
        (``nodes``: the device nodes to deny and the problems, asked already)."""
        echo = self.options.echo
        denied, problems = await (self._denied(record) if nodes is None else nodes)
        for problem in problems:
            echo(f"warning: {problem}")
        spec = LaunchSpec(
            record.agent_id,
            record.workload,
            argv,
            config,
            base_env=os.environ,
            ledger_key=f"{record.agent_id}/{record.workload.id}",
            image=self.options.image,
            node_device_nodes=denied,  # type: ignore[arg-type]
            memory_limit_required=not self.options.no_memory_limit,
            ledger_id=self.node.ledger_id_for(self.runtime),
            pids_max=self.options.pids,
            terminal="" if terminal is None else terminal.spec,
        )
        handle = await self.runtime.create(spec)
        self.node.record_handle(record.key, handle)
        self.options.checkpoint("created")
        missing = announced_gaps(handle.details.get("missing", ""))
        if missing and not self.options.verbose:
            echo(f"warning: not contained: {missing} (accelkit -v run ... shows the cgroups)")
        if self.options.verbose:
            for line in self.runtime.describe(handle):
                echo(line)
        return handle

    async def teardown(
        self, record: LedgerRecord, handle: WorkloadHandle | None, driver: WorkloadLifecycle
    ) -> None:
        """pre_terminate, stop the workload, post_terminate and release.

        Each step runs even when an earlier one failed; a failure is raised once the later steps
        have run. A workload its runtime cannot be reached to stop (the engine is gone) may run
        on: it keeps its devices, and ``BookingKept`` says so (:mod:`.kept_booking`).
        """
        unreachable: WorkloadUnreachable | None = None
        try:
            try:
                await driver.pre_terminate()
            finally:
                if handle is None:
                    await self.runtime.discard(record.workload, None)
                else:
                    try:
                        await self.runtime.stop(handle, self.options.grace)
                    except WorkloadUnreachable as exc:
                        unreachable = exc
        finally:
            if unreachable is not None:
                raise keep_booking(self.node.bookkeeper, record, unreachable) from unreachable
            try:
                await driver.post_terminate()
            except WorkloadError as exc:
                self.options.echo(f"warning: {exc}")
