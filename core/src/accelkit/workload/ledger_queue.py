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

The wait is bounded like SQLite's own (``timeout``): a holder that is stopped (``SIGSTOP``) or
stuck does not keep the others waiting for ever. Past the bound a waiter leaves the queue and
meets SQLite's lock, whose busy timeout then answers with the usual "database is locked" error;
the queue's lock, should it come later, is handed on at once.
"""

from __future__ import annotations

import fcntl
import os
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
        # a queue nobody closed still gives its files (and a lock it holds) back when collected
        self._closer = weakref.finalize(self, _close_all, (lock_fd, turn_fd), self._key)

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
        """Queue for the lock on a helper thread (``flock`` has no timeout of its own)."""
        decided = threading.Lock()
        got = threading.Event()
        abandoned = False

        def wait() -> None:
            # through the turnstile: a waiter woken by the last holder may not have run yet,
            # and it holds the turnstile until it has the lock
            fcntl.flock(self._turn_fd, fcntl.LOCK_EX)
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            finally:
                fcntl.flock(self._turn_fd, fcntl.LOCK_UN)
            with decided:
                if abandoned:  # the waiter left the queue: hand the lock on at once
                    fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
                else:
                    got.set()

        threading.Thread(target=wait, name="ledger-queue", daemon=True).start()
        if got.wait(timeout):
            return True
        with decided:
            if got.is_set():
                return True
            abandoned = True
        return False

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
        """Close the files (which releases a lock still held)."""
        self.leave()
        self._closer()


def _close_all(fds: tuple[int, ...], key: tuple[int, int]) -> None:
    for fd in fds:
        os.close(fd)
    with _guard:
        _held.discard(key)
