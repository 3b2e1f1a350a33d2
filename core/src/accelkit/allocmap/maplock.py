"""The lock of an alloc map: one ``list.pop`` to take it and one ``list.append`` to give it back.

An alloc map's fast paths take the map's lock once per call, and at a few hundred nanoseconds
per call a ``threading.Lock`` (about 60 ns to acquire and release) was a fifth of what
``allocate`` and ``free`` cost on the benchmarks' one-device map. :class:`MapLock` is a lock
whose uncontended acquire and release are a ``pop`` and an ``append`` on a list holding one
token (about 15 ns). Both are atomic: under the GIL, and in the free-threaded build, where
lists lock themselves.

Holding the lock means holding the token. A thread that finds the list empty (``take`` raises
:class:`IndexError`) calls :meth:`MapLock.wait`, which blocks on a gate of its own until a
release hands it a turn. So a contended lock blocks like any lock, without spinning:

- a waiter first puts its gate in ``waiters``, then tries to take the token again;
- a release first gives the token back, then, if ``waiters`` is not empty, opens the gate of
  the first waiter (:meth:`MapLock.wake`).

Whichever of the two comes second sees the other, so no waiter sleeps while the token is free.
A woken waiter that finds the token taken again (by a thread on the fast path) puts its gate
back and waits for the next release. As a safety net against a missed wake-up (a memory model
weaker than the GIL's), a waiter looks again every :data:`RECHECK_S` seconds.

The fast paths inline acquire and release::

    try:
        take()
    except IndexError:
        wait()
    try:
        ...
    finally:
        put(True)
        if waiters:
            wake()
"""

from __future__ import annotations

import _thread
from collections.abc import Callable
from contextlib import suppress
from types import TracebackType
from typing import Any

#: how long a waiter sleeps at most before it looks at the token again by itself
RECHECK_S = 0.005


class MapLock:
    """A mutual-exclusion lock (not reentrant) whose uncontended path is two list operations.

    ``take`` and ``put`` are the token list's ``pop`` and ``append``; ``waiters`` holds the
    gates of blocked threads, first come first. ``with lock:`` and :meth:`acquire` /
    :meth:`release` work as they do on a ``threading.Lock`` (blocking, no timeout).
    """

    __slots__ = ("put", "take", "waiters")

    def __init__(self) -> None:
        token = [True]
        #: take the token; raises IndexError while another thread holds it
        self.take = token.pop
        #: give the token back (only its holder may)
        self.put = token.append
        #: the gates of the threads waiting for the token, first come first
        self.waiters: list[_thread.LockType] = []

    def acquire(self) -> bool:
        """Block until this thread holds the lock; return True."""
        try:
            self.take()
        except IndexError:
            self.wait()
        return True

    def wait(self) -> None:
        """Block until this thread holds the lock, after ``take`` found it held."""
        gate = _thread.allocate_lock()
        gate.acquire()
        waiters, take = self.waiters, self.take
        while True:
            waiters.append(gate)  # first be seen waiting, then look: see the module doc
            try:
                take()
            except IndexError:
                if not gate.acquire(timeout=RECHECK_S):  # no turn handed over in time
                    try:
                        waiters.remove(gate)
                    except ValueError:  # a release took the gate and is opening it
                        gate.acquire()
                continue
            with suppress(ValueError):  # a release took the gate out to open it: it is spent
                waiters.remove(gate)
            return

    def release(self) -> None:
        """Give the lock back and wake the first waiter, if any."""
        self.put(True)
        if self.waiters:
            self.wake()

    def wake(self) -> None:
        """Open the gate of the first waiting thread (after the token was given back)."""
        try:
            gate = self.waiters.pop(0)
        except IndexError:  # another release woke the last one
            return
        gate.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


#: what the fast paths inline: ``take``, ``put``, ``wait``, ``wake`` and ``waiters``
Inlined = tuple[
    Callable[[], bool], Callable[[bool], None], Callable[[], None], Callable[[], None], list[Any]
]


def inlined(lock: MapLock) -> Inlined:
    """The parts of ``lock`` the fast paths hold in cells (see the module doc)."""
    return lock.take, lock.put, lock.wait, lock.wake, lock.waiters
