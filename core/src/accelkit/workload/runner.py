"""Running a command as a workload of a runtime through the whole lifecycle (DESIGN §9, §14).

The order: ``runtime.new_workload`` → ``node.book`` → the hooks' ``pre_create`` →
``runtime.create`` (the handle is recorded in the ledger before anything of the user's runs) →
``runtime.start`` → ``post_create`` → ``runtime.wait`` → ``pre_terminate`` →
``runtime.stop(grace)`` → ``post_terminate`` → release.

Each step is announced to ``checkpoint(name)`` (the crash tests' launcher pauses the command
at one of them): ``booked``, ``pre_create:<plugin>`` per hook, ``prepared``, ``created``,
``spawned`` (the command runs), ``post_create:<plugin>``, ``running``, ``exited``,
``pre_terminate:<plugin>``, ``post_terminate:<plugin>``, ``released``.

Signals: SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to every process of the workload once
it runs; ``grace`` seconds later whatever is left gets SIGKILL, and a second SIGINT or SIGTERM
kills at once. Before the command runs the first signal aborts the run cleanly (status 128 + N).
Once the teardown has begun nothing stops it half-way: a cancellation waits for it to end —
every hook gets its ``post_terminate``, the runtime stops the workload and the allocation is
released.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import signal
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from accelkit.errors import InvalidResourceArgument, WorkloadError
from accelkit.events import WorkloadPhase
from accelkit.runtime.base import LaunchSpec, Runtime, WorkloadHandle, WorkloadUnreachable
from accelkit.runtime.cgroups import V2_DEVICES_NOTE
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
from accelkit.workload.liveness import ProcessStamp
from accelkit.workload.record import LedgerRecord

if TYPE_CHECKING:
    from accelkit.node import Node

__all__ = ["EXIT_CANNOT_RUN", "FORWARDED_SIGNALS", "announced_gaps", "run_workload"]

Checkpoint = Callable[[str], None]
Echo = Callable[[str], None]
EXIT_CANNOT_RUN = 127
#: the signals ``accelkit run`` passes on to the whole workload
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
_KILL_AT_ONCE = (signal.SIGINT, signal.SIGTERM)
_T = TypeVar("_T")


class _SignalRelay:
    """Forwards signals to the running workload, SIGKILL after the grace; before, cancels once.

    Once :attr:`protected` is set (the teardown has begun) a signal never cancels anything: it is
    forwarded to the workload if one runs, else ignored.
    """

    def __init__(self, task: asyncio.Task[int], grace: float) -> None:
        self.loop = asyncio.get_running_loop()
        self.task = task
        self.grace = grace
        self.target: tuple[Runtime, WorkloadHandle] | None = None
        self.received: int | None = None
        self.forwarded: int | None = None
        self.protected = False
        self._timer: asyncio.TimerHandle | None = None
        self._sends: set[asyncio.Task[None]] = set()

    def __enter__(self) -> _SignalRelay:
        _ROUTES.add(self)
        return self

    def __exit__(self, *_exc: object) -> None:
        _ROUTES.discard(self)
        if self._timer is not None:
            self._timer.cancel()

    def deliver(self, signum: int) -> None:
        """Called from the signal handler: act on ``signum`` in the relay's event loop."""
        with contextlib.suppress(RuntimeError):  # its loop closed: the run is over
            self.loop.call_soon_threadsafe(self._on_signal, signum)

    def _on_signal(self, signum: int) -> None:
        if self.target is not None:
            self._forward(signum)
            return
        if self.protected or self.received is not None:
            return  # the run is already being torn down
        self.received = signum
        self.task.cancel()

    def _forward(self, signum: int) -> None:
        if self.forwarded is not None and signum in _KILL_AT_ONCE:
            self._send(signal.SIGKILL)  # a second Ctrl-C: no more waiting
            return
        first = self.forwarded is None
        self.forwarded = signum
        self._send(signum)
        if first:
            self._timer = self.loop.call_later(self.grace, self._send, signal.SIGKILL)

    def _send(self, signum: int) -> None:
        if self.target is None:
            return
        runtime, handle = self.target
        send = self.loop.create_task(runtime.signal(handle, signum))
        self._sends.add(send)
        send.add_done_callback(self._sends.discard)


class _SignalRoutes:
    """The process's handlers of :data:`FORWARDED_SIGNALS`, while any run is under way.

    Installed when the first run begins and the previous handlers put back when the last one
    ends, so concurrent runs of one process each get every signal. ``signal.signal`` directly,
    not the loop's ``add_signal_handler``: that one checks the number against the set of valid
    signals on every call, which cost a millisecond of every run. Only the main thread can catch
    signals; a run in another thread simply has none forwarded.
    """

    def __init__(self) -> None:
        self.relays: set[_SignalRelay] = set()
        self.previous: dict[int, Any] = {}

    def add(self, relay: _SignalRelay) -> None:
        if not self.previous and threading.current_thread() is threading.main_thread():
            for signum in FORWARDED_SIGNALS:
                self.previous[signum] = signal.signal(signum, self._handle)
                signal.siginterrupt(signum, False)  # as the loop's handlers: calls restart
        self.relays.add(relay)

    def discard(self, relay: _SignalRelay) -> None:
        self.relays.discard(relay)
        if not self.relays and threading.current_thread() is threading.main_thread():
            for signum, handler in self.previous.items():
                # None: the handler was not set from Python; the default is what remains
                signal.signal(signum, signal.SIG_DFL if handler is None else handler)
            self.previous.clear()

    def _handle(self, signum: int, _frame: object) -> None:
        for relay in list(self.relays):
            relay.deliver(signum)


_ROUTES = _SignalRoutes()


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
    node: Node,
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
) -> int:
    """Book ``slots``, run ``argv`` in ``runtime`` through every hook, tear down; its status.

    Errors of the booking or of ``pre_create`` (``InsufficientResource``,
    ``WorkloadCreationDenied`` …) and a runtime that cannot contain the workload
    (``RuntimeUnavailable``) are raised with nothing left booked. A command that cannot be
    started gives status 127; a signal received before it starts, 128 + the signal number.
    """
    chosen = node.runtimes.get(runtime)
    if chosen is None:
        known = ", ".join(sorted(node.runtimes)) or "none"
        msg = f"unknown runtime {runtime!r} (runtimes: {known})"
        raise InvalidResourceArgument(msg)
    _check_run(argv, grace)
    task = asyncio.current_task()
    if task is None:
        msg = "run_workload must run inside an asyncio task"
        raise RuntimeError(msg)
    with _SignalRelay(task, grace) as relay:
        options = _Options(image, grace, no_memory_limit, verbose, checkpoint, echo)
        run = _Run(node, chosen, options, relay)
        try:
            return await run.run(agent_id, slots, argv)
        except asyncio.CancelledError:
            if relay.received is None:
                raise
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


@attrs.frozen
class _Options:
    image: str | None
    grace: float
    no_memory_limit: bool
    verbose: bool
    checkpoint: Checkpoint
    echo: Echo


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


def _devices(record: LedgerRecord) -> str:
    names = sorted(
        f"{key}:{device}"
        for key, alloc in record.allocation.items()
        for per_device in alloc.values()
        for device in per_device
    )
    return ", ".join(dict.fromkeys(names)) or "none"


@attrs.frozen
class _Run:
    node: Node
    runtime: Runtime
    options: _Options
    relay: _SignalRelay

    async def run(
        self, agent_id: AgentId, slots: Mapping[SlotName, Decimal], argv: Sequence[str]
    ) -> int:
        echo, checkpoint = self.options.echo, self.options.checkpoint
        workload = await self.runtime.new_workload(agent_id)
        try:
            try:
                record = await self.node.book(
                    agent_id, workload, slots, leader=_leader_of(workload)
                )
            finally:
                for line in self.node.last_report.messages():
                    echo(line)
            checkpoint("booked")
            echo(f"workload {workload.id} on agent {agent_id}: devices {_devices(record)}")

            def on_phase(plugin: DeviceName, phase: WorkloadPhase) -> None:
                checkpoint(f"{phase.value}:{plugin}")

            driver = self.node.lifecycle(record, on_phase=on_phase)
            config = await driver.prepare()
        except BaseException:
            await _to_the_end(self.runtime.discard(workload, None))
            raise
        checkpoint("prepared")
        return await self.supervise(record, driver, config, argv)

    async def supervise(
        self,
        record: LedgerRecord,
        driver: WorkloadLifecycle,
        config: WorkloadConfig,
        argv: Sequence[str],
    ) -> int:
        echo, checkpoint = self.options.echo, self.options.checkpoint
        status = EXIT_CANNOT_RUN
        handle: WorkloadHandle | None = None
        try:
            handle = await self.create(record, config, argv)
            try:
                await self.runtime.start(handle)
            except WorkloadError as exc:
                echo(f"error: {exc}")
                return EXIT_CANNOT_RUN
            self.relay.target = (self.runtime, handle)
            checkpoint("spawned")
            await driver.post_create()
            checkpoint("running")
            status = await self.runtime.wait(handle)
            for note in await self.runtime.exit_notes(handle):
                echo(f"error: {note}")
            checkpoint("exited")
        finally:
            self.relay.protected = True
            await _to_the_end(self.teardown(record, handle, driver))
        checkpoint("released")
        return status

    async def create(
        self, record: LedgerRecord, config: WorkloadConfig, argv: Sequence[str]
    ) -> WorkloadHandle:
        """Contain the workload and record its handle before anything of the user's runs."""
        echo = self.options.echo
        denied, problems = await denied_device_nodes(
            self.node.host.plugins, record.allocation, self.node.config.plugins.hook_timeout
        )
        for problem in problems:
            echo(f"warning: {problem}")
        # LaunchSpec's bare tuple/frozenset converters are generic: mypy cannot solve them
        spec = LaunchSpec(
            record.agent_id,
            record.workload,
            argv,  # type: ignore[arg-type]
            config,
            base_env=os.environ,
            ledger_key=f"{record.agent_id}/{record.workload.id}",
            image=self.options.image,
            node_device_nodes=denied,  # type: ignore[arg-type]
            memory_limit_required=not self.options.no_memory_limit,
            ledger_id=self.node.ledger_id_for(self.runtime),
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
