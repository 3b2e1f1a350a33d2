"""Every call into a plugin runs under a time limit (DESIGN §4).

Asynchronous plugin methods are awaited under :func:`asyncio.wait_for`; synchronous ones (imports,
``device_slots``, ``create_agent_context`` …) run in a worker thread, so the limit fires even when
the plugin blocks. A thread that outlives its limit cannot be killed: it is left to finish on its
own (as a daemon, so it never holds the process open) and its result is discarded.

The message always reads ``plugin 'x' timed out after 30 s in list_devices``, which is what the
loader reports for a plugin that hangs at start-up and what a lifecycle hook's failure says.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import TypeVar

from accelkit.errors import PluginTimeout

__all__ = [
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_HOOK_TIMEOUT",
    "call_async",
    "call_blocking",
    "call_sync",
    "timeout_message",
]

T = TypeVar("T")

#: DESIGN §4 defaults: ``[plugins] call-timeout`` and ``hook-timeout``
DEFAULT_CALL_TIMEOUT = Decimal(30)
DEFAULT_HOOK_TIMEOUT = Decimal(60)


def timeout_message(plugin: str, method: str, timeout: Decimal | float) -> str:
    """``plugin 'x' timed out after 30 s in list_devices``."""
    seconds = Decimal(str(timeout)).normalize()
    text = f"{seconds:f}"
    return f"plugin {plugin!r} timed out after {text} s in {method}"


async def call_async(
    plugin: str, method: str, timeout: Decimal | float, call: Callable[[], Awaitable[T]]
) -> T:
    """Await ``call()`` for at most ``timeout`` seconds; :class:`PluginTimeout` after that."""
    try:
        return await asyncio.wait_for(call(), float(timeout))
    except TimeoutError:
        raise PluginTimeout(timeout_message(plugin, method, timeout)) from None


async def call_sync(plugin: str, method: str, timeout: Decimal | float, call: Callable[[], T]) -> T:
    """Run the blocking ``call()`` in a daemon thread, for at most ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(outcome: Callable[[], None]) -> None:
        if not future.done():
            outcome()

    def hand_over(outcome: Callable[[], None]) -> None:
        # RuntimeError: the loop closed while the call overran, and nobody waits for it
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, outcome)

    def work() -> None:
        try:
            result = call()
        except BaseException as exc:  # handed to the waiting coroutine
            error = exc
            hand_over(lambda: future.set_exception(error))
        else:
            hand_over(lambda: future.set_result(result))

    threading.Thread(target=work, name=f"accelkit-{plugin}-{method}", daemon=True).start()
    try:
        return await asyncio.wait_for(future, float(timeout))
    except TimeoutError:
        raise PluginTimeout(timeout_message(plugin, method, timeout)) from None


def call_blocking(plugin: str, method: str, timeout: Decimal | float, call: Callable[[], T]) -> T:
    """:func:`call_sync` for code outside an event loop (the thread is a daemon too)."""
    pool = concurrent.futures.Future[T]()

    def work() -> None:
        try:
            pool.set_result(call())
        except BaseException as exc:  # handed to the waiting caller
            pool.set_exception(exc)

    threading.Thread(target=work, name=f"accelkit-{plugin}-{method}", daemon=True).start()
    try:
        return pool.result(float(timeout))
    except concurrent.futures.TimeoutError:
        raise PluginTimeout(timeout_message(plugin, method, timeout)) from None
