"""The launcher a process runtime keeps ready for its next workload.

An interpreter takes several milliseconds to start, and a workload's start would wait for it.
:meth:`SpareLauncher.keep` starts one in a thread of its own, so that neither the start nor the
interpreter's start-up is on the path of the workload being made; :meth:`SpareLauncher.take`
hands it to the next workload, only if a launcher started then would inherit the same
(working directory, standard descriptors, umask, limits...: :mod:`.spawn_state`); else the
spare is killed and the workload starts a fresh one. A spare runs nothing: it waits for a plan,
exits when this process dies (its plan pipe closes: the launcher's empty plan) and is killed by
:meth:`SpareLauncher.close`, which reaps it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from concurrent.futures import Future

from accelkit.errors import WorkloadError
from accelkit.runtime.process_tree import ProcessTree
from accelkit.runtime.spawn_state import SpawnState, spawn_state

__all__ = ["SpareLauncher"]

_Spawned = tuple[ProcessTree, SpawnState, bool]


def _spawn(contain: bool, done: Future[_Spawned]) -> None:
    try:
        state = spawn_state()  # this thread's: the spare inherits from it
        tree = ProcessTree.spawn(contain=contain)
        if spawn_state() != state:  # changed meanwhile: which did the spare get? never taken
            state = (None,)
        done.set_result((tree, state, contain))
    except BaseException as exc:  # handed to whoever takes the spare
        done.set_exception(exc)


class SpareLauncher:
    """At most one launcher, ready or being started; see the module docstring."""

    def __init__(self) -> None:
        self._spawning: Future[_Spawned] | None = None

    def keep(self, *, contain: bool) -> None:
        """Start a spare in the background, unless one is kept already."""
        if self._spawning is None:
            self._spawning = Future()
            threading.Thread(target=_spawn, args=(contain, self._spawning), daemon=True).start()

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
        """Kill and reap the spare, if any (waiting for one being started)."""
        spare = await self._detach()
        if spare is not None:
            await _end(spare[0])

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
