"""The launcher a process runtime keeps ready for its next workload.

An interpreter takes several milliseconds to start, and a workload's start would wait for it.
:meth:`SpareLauncher.keep` starts one in a thread of its own, so that neither the start nor the
interpreter's start-up is on the path of the workload being made; :meth:`SpareLauncher.take`
hands it to the next workload, only if a launcher started then would inherit the same
(working directory, standard descriptors, umask, limits...: :mod:`.spawn_state`); else the
spare is killed and the workload starts a fresh one. A spare runs nothing: it waits for a plan,
exits when this process dies (its plan pipe closes: the launcher's empty plan) and is killed by
:meth:`SpareLauncher.close`, which reaps it.

Spares are cloned by a fork server (:mod:`.fork_server`) started with the first: one
interpreter's start-up for all of them instead of one each. A server started with other
inheritance than a launcher started now would get is ended and a new one started; where none
can run, each spare is started directly. The spares are started by one thread, kept for the
runtime's life.
"""

from __future__ import annotations

import asyncio
import contextlib
from concurrent.futures import Future, ThreadPoolExecutor

from accelkit.errors import WorkloadError
from accelkit.runtime.fork_server import ForkServer
from accelkit.runtime.process_tree import ProcessTree
from accelkit.runtime.spawn_state import SpawnState, spawn_state

__all__ = ["SpareLauncher"]

_Spawned = tuple[ProcessTree, SpawnState, bool]


class SpareLauncher:
    """At most one launcher, ready or being started; see the module docstring."""

    def __init__(self) -> None:
        self._spawning: Future[_Spawned] | None = None
        self._thread: ThreadPoolExecutor | None = None
        self._server: ForkServer | None = None
        #: the fork server failed to start or to answer: spares are started directly
        self._direct = False

    def keep(self, *, contain: bool) -> None:
        """Start a spare in the background, unless one is kept already."""
        if self._spawning is None:
            if self._thread is None:
                self._thread = ThreadPoolExecutor(1, thread_name_prefix="accelkit-launchers")
            self._spawning = self._thread.submit(self._spawn, contain)

    def _spawn(self, contain: bool) -> _Spawned:
        """A spare, from the fork server where it can; else started here."""
        state = spawn_state()  # this thread's: the server (or the spare) inherits from it
        server = self._server
        if server is not None and (server.state, server.contain) != (state, contain):
            self._server = None
            server.close()
            server = None
        if server is None and not self._direct:
            server = self._server = ForkServer.start(contain=contain)
            self._direct = server is None
        if server is not None:
            try:
                return server.spawn(), server.state, contain
            except OSError:
                self._server, self._direct = None, True
                server.close()
        tree = ProcessTree.spawn(contain=contain)
        if spawn_state() != state:  # changed meanwhile: which did the spare get? never taken
            state = (None,)
        return tree, state, contain

    @property
    def pid(self) -> int | None:
        """The spare's pid, if there is one (waiting for one being started)."""
        spawning = self._spawning
        if spawning is None or spawning.exception() is not None:
            return None
        return spawning.result()[0].pid

    async def take(self, *, contain: bool) -> ProcessTree | None:
        """The spare, if it lives and was started as one started now would be (``contain``
        included); else ``None``, the spare ended."""
        spare = await self._detach()
        if spare is None:
            return None
        tree, state, started_contained = spare
        if tree.process.poll() is None and (state, started_contained) == (spawn_state(), contain):
            return tree
        await _end(tree)
        return None

    async def close(self) -> None:
        """Kill and reap the spare, if any (waiting for one being started), and end the fork
        server and the thread."""
        spare = await self._detach()
        if spare is not None:
            await _end(spare[0])
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.shutdown(wait=False)
        server, self._server = self._server, None
        if server is not None:
            server.close()

    async def _detach(self) -> _Spawned | None:
        spawning, self._spawning = self._spawning, None
        if spawning is None:
            return None
        with contextlib.suppress(OSError, WorkloadError):  # none was started
            return await asyncio.wrap_future(spawning)
        return None


async def _end(spare: ProcessTree) -> None:
    with contextlib.suppress(ProcessLookupError):
        spare.process.kill()  # it runs nothing; EOF would wait for its interpreter
    spare.abort()
    await spare.wait()
