"""Running a command as a process-tree workload through the whole lifecycle.

Steps, each announced to ``checkpoint(name)`` (the run command can pause at any of them for
crash tests): ``booked`` (allocation recorded), ``pre_create:<plugin>`` per hook, ``prepared``,
``spawned`` (the command runs), ``post_create:<plugin>``, ``running``, ``exited``,
``pre_terminate:<plugin>``, ``post_terminate:<plugin>``, ``released``.

SIGINT and SIGTERM are forwarded to the workload's process group once the command runs; before
that the first one aborts the run cleanly. When the command exits, whatever it left running is
ended too. Once the teardown has begun nothing stops it half-way: signals are only forwarded (or,
with no command running, ignored), and a cancellation of the run waits for the teardown to end —
every hook gets its ``post_terminate`` and the allocation is released.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Awaitable, Callable, Mapping, Sequence
from decimal import Decimal
from typing import TypeVar

import attrs

from accelkit.errors import WorkloadError
from accelkit.events import WorkloadPhase
from accelkit.types import AgentId, DeviceName, SlotName, Workload, WorkloadConfig
from accelkit.workload.bookkeeper import Bookkeeper
from accelkit.workload.lifecycle import WorkloadLifecycle
from accelkit.workload.memlimit import LimitMethod, MemoryLimit, choose_memory_limit
from accelkit.workload.process_tree import ProcessTree
from accelkit.workload.render.process import render_process

Checkpoint = Callable[[str], None]
Echo = Callable[[str], None]
EXIT_CANNOT_RUN = 127
_T = TypeVar("_T")


class _SignalRelay:
    """Forwards SIGINT/SIGTERM to the tree once it runs; before that, cancels the run once.

    Once :attr:`protected` is set (the teardown has begun) a signal never cancels anything: it is
    forwarded to the tree if one was started, else ignored.
    """

    def __init__(self, task: asyncio.Task[int]) -> None:
        self.loop = asyncio.get_running_loop()
        self.task = task
        self.tree: ProcessTree | None = None
        self.received: int | None = None
        self.protected = False

    def __enter__(self) -> _SignalRelay:
        for signum in (signal.SIGINT, signal.SIGTERM):
            self.loop.add_signal_handler(signum, self._on_signal, signum)
        return self

    def __exit__(self, *_exc: object) -> None:
        for signum in (signal.SIGINT, signal.SIGTERM):
            self.loop.remove_signal_handler(signum)

    def _on_signal(self, signum: int) -> None:
        if self.tree is not None:
            self.tree.signal(signum)
            return
        if self.protected or self.received is not None:
            return  # the run is already being torn down
        self.received = signum
        self.task.cancel()


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


async def run_workload(
    keeper: Bookkeeper,
    agent_id: AgentId,
    slots: Mapping[SlotName, Decimal],
    argv: Sequence[str],
    *,
    grace: float = 5.0,
    checkpoint: Checkpoint = lambda _name: None,
    echo: Echo = lambda _line: None,
) -> int:
    """Book ``slots``, run ``argv`` through every hook, tear down; the command's exit status.

    Errors of the booking or of ``pre_create`` (``InsufficientResource``,
    ``WorkloadCreationDenied`` …) are raised with nothing left booked. A command that cannot be
    started gives status 127; a signal received before it starts, 128 + the signal number.
    """
    task = asyncio.current_task()
    if task is None:
        msg = "run_workload must run inside an asyncio task"
        raise RuntimeError(msg)
    with _SignalRelay(task) as relay:
        run = _Run(keeper, grace, checkpoint, echo, relay)
        try:
            return await run.run(agent_id, slots, argv)
        except asyncio.CancelledError:
            if relay.received is None:
                raise
            return 128 + relay.received


@attrs.frozen
class _Run:
    keeper: Bookkeeper
    grace: float
    checkpoint: Checkpoint
    echo: Echo
    relay: _SignalRelay

    async def run(
        self, agent_id: AgentId, slots: Mapping[SlotName, Decimal], argv: Sequence[str]
    ) -> int:
        tree = await ProcessTree.start()
        workload = Workload.process_tree(f"pid:{tree.pid}")
        try:
            try:
                record = await self.keeper.book(agent_id, workload, slots, leader=tree.leader)
            finally:
                for line in self.keeper.last_report.messages():
                    self.echo(line)
            self.checkpoint("booked")

            def on_phase(plugin: DeviceName, phase: WorkloadPhase) -> None:
                self.checkpoint(f"{phase.value}:{plugin}")

            driver = self.keeper.lifecycle(record, on_phase=on_phase)
            config = await driver.prepare()
        except BaseException:
            tree.abort()
            await tree.wait()
            raise
        self.checkpoint("prepared")
        return await self.supervise(tree, driver, config, argv)

    async def supervise(
        self,
        tree: ProcessTree,
        driver: WorkloadLifecycle,
        config: WorkloadConfig,
        argv: Sequence[str],
    ) -> int:
        status = EXIT_CANNOT_RUN
        memory = MemoryLimit(LimitMethod.NONE)
        try:
            plan = render_process(config, os.environ)
            memory = choose_memory_limit(plan.memory_limit, driver.workload.id)
            if plan.cpu_affinity is not None:
                self.echo(f"cpu affinity {list(plan.cpu_affinity)}")
            if memory.limit is not None:
                self.echo(memory.description)
            for note in plan.notes:
                self.echo(note)
            try:
                tree.launch(argv, plan, memory)
            except WorkloadError as exc:
                self.echo(f"error: {exc}")
                await tree.wait()
                return EXIT_CANNOT_RUN
            self.relay.tree = tree
            self.checkpoint("spawned")
            await driver.post_create()
            self.checkpoint("running")
            status = await tree.wait()
            self.checkpoint("exited")
        finally:
            self.relay.protected = True
            await _to_the_end(self.teardown(tree, driver, memory))
        self.checkpoint("released")
        return status

    async def teardown(
        self, tree: ProcessTree, driver: WorkloadLifecycle, memory: MemoryLimit
    ) -> None:
        """pre_terminate, end the tree, remove its cgroup, post_terminate and release.

        Each step runs even when an earlier one failed; a failure is raised once the later steps
        have run.
        """
        try:
            try:
                try:
                    await driver.pre_terminate()
                finally:
                    tree.abort()  # a launcher still waiting for its plan exits without running
                    await tree.end(self.grace)
            finally:
                memory.remove()
        finally:
            try:
                await driver.post_terminate()
            except WorkloadError as exc:
                self.echo(f"warning: {exc}")
