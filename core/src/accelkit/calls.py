"""Every call into a plugin runs on that plugin's own worker, under a time limit (DESIGN §4, §18).

A plugin's worker is a daemon thread running an event loop of its own. Its coroutines
(``init``, ``list_devices``, hooks, metrics, health) and its synchronous methods
(``device_slots``, ``create_agent_context``, ``device_nodes`` …) all run there, so a plugin
that blocks instead of awaiting (``time.sleep`` inside ``async def``) stalls only its own
worker: the caller's loop keeps running, its limit fires, and signals are still handled.

A call that outlives its limit is cut off there and cancelled on the worker: a coroutine that
awaits ends at once and its worker carries on. One that cannot end within :data:`SETTLE`
seconds (it blocks), or a synchronous call still running at its limit, leaves its worker stuck:
the worker is abandoned (never joined: it is a daemon, so it never holds the process open) and
the plugin is failed for the rest of the process. Every later call into it is refused at once
with the reason, and whoever listens (:func:`on_failure`; the loader marks the plugin's record
``failed``) hears of it once.

The worker is that of the plugin a call belongs to: the plugin's own methods, an agent
context's (its ``plugin``) and a lifecycle hook's (the ``plugin`` its context set). A call that
belongs to no plugin object (an entry point's import, a hook implementation, a runtime's method)
runs as before: a coroutine on the caller's loop, a blocking call on a spare daemon thread.

The message always reads ``plugin 'x' timed out after 30 s in list_devices``, which is what the
loader reports for a plugin that hangs at start-up and what a lifecycle hook's failure says.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import threading
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from decimal import Decimal
from queue import SimpleQueue
from typing import Any, TypeVar

import attrs

from accelkit.errors import PluginTimeout
from accelkit.plugin import AbstractAgentContext, AbstractComputePlugin, AbstractLifecycleHook

__all__ = [
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_HOOK_TIMEOUT",
    "SETTLE",
    "PluginWorker",
    "call_async",
    "call_blocking",
    "call_sync",
    "failure_of",
    "iterate",
    "on_failure",
    "plugin_of",
    "retire",
    "timeout_message",
    "worker_of",
]

T = TypeVar("T")

#: DESIGN §4 defaults: ``[plugins] call-timeout`` and ``hook-timeout``
DEFAULT_CALL_TIMEOUT = Decimal(30)
DEFAULT_HOOK_TIMEOUT = Decimal(60)

#: seconds a call cut off has to end on the worker before the worker is taken as stuck
SETTLE = 1.0
_POLL = 0.01

#: where a plugin object keeps its worker (an attribute, so no registry outlives the plugin)
_WORKER = "_accelkit_worker"


def timeout_message(plugin: str, method: str, timeout: Decimal | float) -> str:
    """``plugin 'x' timed out after 30 s in list_devices``."""
    seconds = Decimal(str(timeout)).normalize()
    text = f"{seconds:f}"
    return f"plugin {plugin!r} timed out after {text} s in {method}"


@attrs.define
class _CutOff:
    """A call the caller stopped waiting for (its limit passed, or the caller was cancelled)."""

    ended: threading.Event
    message: str
    deadline: float


class PluginWorker:
    """One plugin's thread and event loop; abandoned, never joined, when it is stuck.

    A call cut off at its limit is cancelled on the worker. A coroutine that awaits ends there
    at once and the worker carries on; one that blocks cannot end, and a coroutine that has not
    ended :data:`SETTLE` seconds after it was cut off (a synchronous call still running at its
    limit, at once) means the worker is stuck: it is abandoned and the plugin failed for the
    process. Every call first waits (at most that long) for the verdict on the calls cut off
    before it.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        #: why the plugin is failed for the process (the first overrun), or ``None``
        self.failure: str | None = None
        self._stopping = False
        self._cut: list[_CutOff] = []
        self._listeners: list[Callable[[str], None]] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._serve, name=f"accelkit-plugin-{name}", daemon=True
        )
        self._thread.start()

    def __repr__(self) -> str:
        state = "failed" if self.failure else "stopped" if self.stopped else "running"
        return f"<PluginWorker {self.name!r} {state}>"

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
        finally:  # stopped: end what the plugin left running (its own tasks), then close
            left = asyncio.all_tasks(self._loop)
            for task in left:
                task.cancel()
            with contextlib.suppress(Exception):
                self._loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
                self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    @property
    def stopped(self) -> bool:
        """Whether the worker was stopped (or its loop ended) and takes no more calls."""
        return self.failure is None and (self._stopping or not self._thread.is_alive())

    def stop(self) -> None:
        """End the worker's loop once the calls under way return (a failed one is left as is)."""
        if self.failure is None:
            self._stopping = True
            with contextlib.suppress(RuntimeError):  # already closed
                self._loop.call_soon_threadsafe(self._loop.stop)

    def listen(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(message)`` once, when the worker is abandoned (at once if it is)."""
        if self.failure is not None:
            listener(self.failure)
        else:
            self._listeners.append(listener)

    # -- the verdict on calls cut off ---------------------------------------------------------

    def _abandon(self, message: str) -> None:
        if self.failure is None:
            self.failure = message
            listeners, self._listeners = self._listeners, []
            for listener in listeners:
                listener(message)

    def _pending(self) -> float | None:
        """Abandon the worker if a call cut off overran its settling time; else how long the
        next verdict may still take (``None``: no call cut off is still running)."""
        self._cut = [c for c in self._cut if not c.ended.is_set()]
        if not self._cut or self.failure is not None:
            return None
        now = time.monotonic()
        if late := [c for c in self._cut if c.deadline <= now]:
            self._abandon(late[0].message)
            return None
        return min(c.deadline for c in self._cut) - now

    async def _settle(self) -> None:
        while (left := self._pending()) is not None:
            await asyncio.sleep(min(left, _POLL))

    def _settle_blocking(self) -> None:
        while (left := self._pending()) is not None:
            self._cut[0].ended.wait(left)

    def _cut_off(self, ended: threading.Event, message: str, settle: float = SETTLE) -> None:
        if not ended.is_set():
            self._cut.append(_CutOff(ended, message, time.monotonic() + settle))

    def _refuse(self, name: str, method: str) -> None:
        if self.failure is not None:
            msg = f"{self.failure}; plugin {name!r} is failed, {method} is not called"
            raise PluginTimeout(msg)

    # -- calls ------------------------------------------------------------------------------------

    def _submit_sync(
        self, call: Callable[[], T], ended: threading.Event
    ) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def work() -> None:
            try:
                if not future.set_running_or_notify_cancel():
                    return
                try:
                    result = call()
                except BaseException as exc:  # handed to the waiting caller
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            finally:
                ended.set()

        self._loop.call_soon_threadsafe(work)
        return future

    def _submit_async(
        self, call: Callable[[], Awaitable[T]], ended: threading.Event
    ) -> concurrent.futures.Future[T]:
        """Start ``call()`` as a task of the worker's loop; ``ended`` is set when it is over
        (cancelled before it began included). Cancelling the future cancels the task."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        async def invoke() -> T:  # call() itself runs on the worker too
            return await call()

        def done(task: asyncio.Task[T]) -> None:
            ended.set()
            with contextlib.suppress(concurrent.futures.InvalidStateError):  # cancelled
                if task.cancelled():
                    future.cancel()
                elif (exc := task.exception()) is not None:
                    future.set_exception(exc)
                else:
                    future.set_result(task.result())

        def start() -> None:
            if future.cancelled():  # the caller gave up before the worker came to it
                ended.set()
                return
            task = self._loop.create_task(invoke())
            task.add_done_callback(done)
            future.add_done_callback(lambda f: self._cancel_if(f, task))

        self._loop.call_soon_threadsafe(start)
        return future

    def _cancel_if(self, future: concurrent.futures.Future[T], task: asyncio.Task[T]) -> None:
        if future.cancelled():
            with contextlib.suppress(RuntimeError):  # the loop is closed
                self._loop.call_soon_threadsafe(task.cancel)

    async def run_async(
        self, name: str, method: str, timeout: Decimal | float, call: Callable[[], Awaitable[T]]
    ) -> T:
        """Await ``call()`` on the worker for at most ``timeout`` seconds; ``name`` is how
        messages name the plugin."""
        await self._settle()
        self._refuse(name, method)
        ended = threading.Event()
        future = self._submit_async(call, ended)
        return await self._wait(name, method, timeout, future, ended, settle=SETTLE)

    async def run_sync(
        self, name: str, method: str, timeout: Decimal | float, call: Callable[[], T]
    ) -> T:
        """Run the blocking ``call()`` on the worker for at most ``timeout`` seconds."""
        await self._settle()
        self._refuse(name, method)
        ended = threading.Event()
        future = self._submit_sync(call, ended)
        # a synchronous call still running at its limit cannot be cancelled: no time to settle
        return await self._wait(name, method, timeout, future, ended, settle=0.0)

    def run_blocking(
        self, name: str, method: str, timeout: Decimal | float, call: Callable[[], T]
    ) -> T:
        """:meth:`run_sync` for code outside an event loop."""
        self._settle_blocking()
        self._refuse(name, method)
        ended = threading.Event()
        future = self._submit_sync(call, ended)
        try:
            return future.result(float(timeout))
        except concurrent.futures.TimeoutError:
            future.cancel()
            message = timeout_message(name, method, timeout)
            self._cut_off(ended, message, 0.0)  # still running: it cannot be cancelled
            self._settle_blocking()
            raise PluginTimeout(message) from None

    async def iterate(
        self, name: str, method: str, call: Callable[[], AsyncIterator[T]]
    ) -> AsyncIterator[T]:
        """The items of the async iterator ``call()`` runs on the worker, as they come.

        No time limit: such an iterator may wait indefinitely between items (``watch_health``).
        Leaving the loop (or being cancelled) cancels it on the worker.
        """
        await self._settle()
        self._refuse(name, method)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        ended = threading.Event()

        def hand_over(kind: str, value: object) -> None:
            with contextlib.suppress(RuntimeError):  # the caller's loop is closed: nobody reads
                loop.call_soon_threadsafe(queue.put_nowait, (kind, value))

        async def relay() -> None:
            try:
                async for item in call():
                    hand_over("item", item)
            except Exception as exc:  # the caller raises it
                hand_over("error", exc)
            else:
                hand_over("end", None)

        future = self._submit_async(relay, ended)
        try:
            while True:
                kind, value = await queue.get()
                if kind == "end":
                    return
                if kind == "error":
                    raise value
                yield value
        finally:
            if not future.done():
                future.cancel()
                self._cut_off(ended, f"plugin {name!r} did not end {method} when cancelled")

    async def _wait(
        self,
        name: str,
        method: str,
        timeout: Decimal | float,
        future: concurrent.futures.Future[T],
        ended: threading.Event,
        *,
        settle: float,
    ) -> T:
        try:
            # cut off, the call is cancelled on the worker: if it awaits, it ends there
            return await asyncio.wait_for(asyncio.wrap_future(future), float(timeout))
        except TimeoutError:
            message = timeout_message(name, method, timeout)
            self._cut_off(ended, message, settle)
            await self._settle()
            raise PluginTimeout(message) from None
        except asyncio.CancelledError:  # the next call hears whether it ended
            self._cut_off(ended, f"plugin {name!r} did not end {method} when cancelled")
            raise


def plugin_of(call: Callable[..., object]) -> AbstractComputePlugin | None:
    """The plugin a call belongs to: the object of a bound method (through ``partial``s) if
    it is a plugin, or the plugin of an agent context or lifecycle hook; else ``None``."""
    target: Any = call
    while isinstance(target, functools.partial):
        target = target.func
    owner = getattr(target, "__self__", None)
    if isinstance(owner, AbstractComputePlugin):
        return owner
    if isinstance(owner, AbstractAgentContext | AbstractLifecycleHook):
        plugin = getattr(owner, "plugin", None)
        return plugin if isinstance(plugin, AbstractComputePlugin) else None
    return None


def worker_of(plugin: AbstractComputePlugin) -> PluginWorker:
    """The plugin's worker, started on first use (again after :func:`retire`, unless failed)."""
    worker: PluginWorker | None = vars(plugin).get(_WORKER)
    if worker is None or worker.stopped:
        worker = PluginWorker(getattr(plugin, "key", type(plugin).__name__))
        setattr(plugin, _WORKER, worker)
        weakref.finalize(plugin, worker.stop)  # a plugin dropped without retire()
    return worker


def failure_of(plugin: AbstractComputePlugin) -> str | None:
    """Why the plugin is failed for the process (a call overran), or ``None``."""
    worker: PluginWorker | None = vars(plugin).get(_WORKER)
    return None if worker is None else worker.failure


def on_failure(plugin: AbstractComputePlugin, listener: Callable[[str], None]) -> None:
    """Call ``listener(message)`` once when a call into ``plugin`` overruns its limit."""
    worker_of(plugin).listen(listener)


def retire(plugin: AbstractComputePlugin) -> None:
    """Stop the plugin's worker once its calls return (after ``cleanup``)."""
    worker: PluginWorker | None = vars(plugin).get(_WORKER)
    if worker is not None:
        worker.stop()


#: idle threads for blocking calls of no plugin (a call that overruns keeps its own till it ends)
_SPARE: list[SimpleQueue[tuple[Callable[[], Callable[[], None]], str]]] = []
_SPARE_LOCK = threading.Lock()


def _on_spare_thread(work: Callable[[], Callable[[], None]], name: str) -> None:
    """Run ``work()`` (it must not raise) on an idle thread or a new one, then what it returns."""
    with _SPARE_LOCK:
        jobs = _SPARE.pop() if _SPARE else None
    if jobs is None:
        jobs = SimpleQueue()
        threading.Thread(target=_spare, args=(jobs,), name=name, daemon=True).start()
    jobs.put((work, name))


def _spare(jobs: SimpleQueue[tuple[Callable[[], Callable[[], None]], str]]) -> None:
    while True:
        work, threading.current_thread().name = jobs.get()
        hand_over = work()
        with _SPARE_LOCK:  # idle before its caller hears, so that the next call finds it
            _SPARE.append(jobs)
        hand_over()


def _worker_for(call: Callable[..., object]) -> PluginWorker | None:
    return None if (plugin := plugin_of(call)) is None else worker_of(plugin)


async def call_async(
    plugin: str, method: str, timeout: Decimal | float, call: Callable[[], Awaitable[T]]
) -> T:
    """Await ``call()`` for at most ``timeout`` seconds; :class:`PluginTimeout` after that.

    The call runs on its plugin's worker (see the module); ``plugin`` names it in messages of
    calls that belong to no plugin object.
    """
    if (worker := _worker_for(call)) is not None:
        return await worker.run_async(plugin, method, timeout, call)
    try:
        return await asyncio.wait_for(call(), float(timeout))
    except TimeoutError:
        raise PluginTimeout(timeout_message(plugin, method, timeout)) from None


async def iterate(
    plugin: str, method: str, call: Callable[[], AsyncIterator[T]]
) -> AsyncIterator[T]:
    """The items of the async iterator ``call()`` (``watch_health()``), run on its plugin's
    worker; without a time limit, as it may wait indefinitely between items."""
    if (worker := _worker_for(call)) is None:
        async for item in call():
            yield item
        return
    async for item in worker.iterate(plugin, method, call):
        yield item


async def call_sync(plugin: str, method: str, timeout: Decimal | float, call: Callable[[], T]) -> T:
    """Run the blocking ``call()`` on its plugin's worker, else a spare thread; ``timeout`` s."""
    if (worker := _worker_for(call)) is not None:
        return await worker.run_sync(plugin, method, timeout, call)
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(outcome: Callable[[], None]) -> None:
        if not future.done():
            outcome()

    def hand_over(outcome: Callable[[], None]) -> None:
        # RuntimeError: the loop closed while the call overran, and nobody waits for it
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, outcome)

    def work() -> Callable[[], None]:
        try:
            result = call()
        except BaseException as exc:  # handed to the waiting coroutine
            error = exc
            return lambda: hand_over(lambda: future.set_exception(error))
        return lambda: hand_over(lambda: future.set_result(result))

    _on_spare_thread(work, f"accelkit-{plugin}-{method}")
    try:
        return await asyncio.wait_for(future, float(timeout))
    except TimeoutError:
        raise PluginTimeout(timeout_message(plugin, method, timeout)) from None


def call_blocking(plugin: str, method: str, timeout: Decimal | float, call: Callable[[], T]) -> T:
    """:func:`call_sync` for code outside an event loop (its spare thread is a daemon too)."""
    if (worker := _worker_for(call)) is not None:
        return worker.run_blocking(plugin, method, timeout, call)
    pool = concurrent.futures.Future[T]()

    def work() -> Callable[[], None]:
        try:
            result = call()
        except BaseException as exc:  # handed to the waiting caller
            return functools.partial(pool.set_exception, exc)
        return functools.partial(pool.set_result, result)

    _on_spare_thread(work, f"accelkit-{plugin}-{method}")
    try:
        return pool.result(float(timeout))
    except concurrent.futures.TimeoutError:
        raise PluginTimeout(timeout_message(plugin, method, timeout)) from None
