"""The queue in front of the ledger's write lock: waiting processes take turns, none sleeps.

SQLite's busy handler makes a writer that finds the database locked sleep and try again (1, 2,
5, 10 ... ms): the lock is free most of that time, and the process that just committed takes
it again before a sleeper wakes, so with four processes booking at once the sleepers' shares
fell 2.8x behind and the total below one process's alone. Before ``BEGIN IMMEDIATE`` a
transaction therefore takes ``ledger.lock`` in the state directory with ``flock``, which the
kernel hands on the moment it is released, and does so through a turnstile, ``ledger.turn``:
a waiter holds the turnstile while it waits for the lock, so the holder, once done, cannot
take the lock again ahead of it.

The queue only orders writers: SQLite's lock stays what excludes them (a process that does
not queue, an older accelkit say, is still kept out by it). A process takes its place once:
a second :class:`~accelkit.workload.ledger.Ledger` of the same process on the same directory
(another thread, or a nested use) does not queue behind the first, and waits for SQLite's
lock as before. Locks of a process that dies are released by the kernel. A state directory
where the files cannot be made (read-only) has no queue.

``flock`` has no timeout, so a queue's waits are made by one thread of its own, started at the
first wait and ended with the queue (a thread started for each wait cost a thread's start and
one more wake-up per hand-over, which four processes booking at once paid on most bookings).
The wait is bounded like SQLite's own (``timeout``): a holder that is stopped (``SIGSTOP``) or
stuck does not keep the others waiting for ever. Past the bound a waiter leaves the queue and
meets SQLite's lock, whose busy timeout then answers with the usual "database is locked" error;
the queue's lock, should it come later, is handed on at once.
"""

from __future__ import annotations

import fcntl
import os
import queue
import threading
import weakref

LOCK_NAME = "ledger.lock"
TURN_NAME = "ledger.turn"

# (device, inode) of each lock file this process holds, whichever Ledger object took it
_held: set[tuple[int, int]] = set()
_guard = threading.Lock()


class WriterQueue:
    """The turnstile and the lock of one state directory (opened through its descriptor)."""

    def __init__(self, lock_fd: int, turn_fd: int) -> None:
        self._lock_fd = lock_fd
        self._turn_fd = turn_fd
        info = os.fstat(lock_fd)
        self._key = (info.st_dev, info.st_ino)
        self._holding = False
        self._waiter: threading.Thread | None = None  # started at the first wait
        self._waiter_pid = 0
        self._requests: queue.SimpleQueue[_Request | None] = queue.SimpleQueue()
        # a queue nobody closed still gives its files (and a lock it holds) back when collected
        fds = (lock_fd, turn_fd)
        self._closer = weakref.finalize(self, _close_all, fds, self._key, self._requests)

    @classmethod
    def open(cls, dir_fd: int) -> WriterQueue | None:
        """The queue of the state directory ``dir_fd``; ``None`` when its files cannot be made."""
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
        fds: list[int] = []
        try:
            for name in (LOCK_NAME, TURN_NAME):
                fds.append(os.open(name, flags, 0o600, dir_fd=dir_fd))
        except OSError:
            for fd in fds:
                os.close(fd)
            return None
        return cls(fds[0], fds[1])

    def enter(self, timeout: float) -> None:
        """Wait for this process's turn (at once when the lock is free or this process holds
        it already), at most ``timeout`` seconds; past it, leave the queue (module docstring)."""
        with _guard:
            if self._key in _held:
                return
            _held.add(self._key)
        try:
            taken = self._take_now() or self._take_within(timeout)
        except BaseException:
            with _guard:
                _held.discard(self._key)
            raise
        if not taken:
            with _guard:
                _held.discard(self._key)
            return
        self._holding = True

    def _take_now(self) -> bool:
        """The lock, when nobody holds or waits for it (no thread needed)."""
        try:
            fcntl.flock(self._turn_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        finally:
            fcntl.flock(self._turn_fd, fcntl.LOCK_UN)
        return True

    def _take_within(self, timeout: float) -> bool:
        """Queue for the lock on the queue's waiter thread (``flock`` has no timeout of its
        own); the thread is started once, not for each wait."""
        if self._waiter is None or self._waiter_pid != os.getpid():  # none yet, or forked
            fds = (self._turn_fd, self._lock_fd)
            self._waiter = threading.Thread(
                target=_serve, args=(*fds, self._requests), name="ledger-queue", daemon=True
            )
            self._waiter.start()
            self._waiter_pid = os.getpid()
        request = _Request()
        self._requests.put(request)
        return request.taken(timeout)

    def leave(self) -> None:
        """Hand the lock on (nothing when :meth:`enter` did not take it)."""
        if not self._holding:
            return
        self._holding = False
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        finally:
            with _guard:
                _held.discard(self._key)

    def close(self) -> None:
        """Close the files (which releases a lock still held) and end the waiter thread."""
        self.leave()
        self._closer()


class _Request:
    """One wait for the lock, which its caller may give up while the waiter thread waits."""

    def __init__(self) -> None:
        self.decided = threading.Lock()
        # held until the waiter thread has the lock for this request: released then (a bare
        # lock: an Event's condition cost both threads more at each hand-over)
        self.got = threading.Lock()
        self.got.acquire()
        self.abandoned = False

    def taken(self, timeout: float) -> bool:
        """Whether the lock came within ``timeout`` seconds; if not, the wait is given up."""
        if self.got.acquire(timeout=max(timeout, 0.0)):
            return True
        with self.decided:
            if self.got.acquire(blocking=False):  # it came meanwhile
                return True
            self.abandoned = True
        return False


def _serve(turn_fd: int, lock_fd: int, requests: queue.SimpleQueue[_Request | None]) -> None:
    """The waiter thread: take the lock for each request in turn (no reference to the queue
    object, which its finalizer may then close)."""
    while (request := requests.get()) is not None:
        # through the turnstile: a waiter woken by the last holder may not have run yet,
        # and it holds the turnstile until it has the lock
        try:
            fcntl.flock(turn_fd, fcntl.LOCK_EX)
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_EX)
            finally:
                fcntl.flock(turn_fd, fcntl.LOCK_UN)
        except OSError:  # the files were closed meanwhile: nobody waits any more
            return
        with request.decided:
            if request.abandoned:  # the caller left the queue: hand the lock on at once
                fcntl.flock(lock_fd, fcntl.LOCK_UN)
            else:
                request.got.release()


def _close_all(
    fds: tuple[int, ...], key: tuple[int, int], requests: queue.SimpleQueue[_Request | None]
) -> None:
    requests.put(None)  # the waiter thread, if any, ends
    for fd in fds:
        os.close(fd)
    with _guard:
        _held.discard(key)
