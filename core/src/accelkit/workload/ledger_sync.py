"""The durable commits of the ledger: the WAL synced after the writers' lock is handed on.

With ``synchronous = FULL`` SQLite syncs the WAL inside ``COMMIT``, while the committing
process still holds the write lock (and the writers' queue, :mod:`.ledger_queue`): every other
writer waited for that process's disk, 1-2 ms a release on the test VM, most of a booking and
release's time in the lock. The connection runs at ``NORMAL`` instead (SQLite syncs the WAL at
checkpoints only), and a durable transaction syncs the WAL itself once it has committed and
handed the lock on, before its caller goes on: the commit is on disk before anything that
depends on it runs (a hook after its intent), and writers sync side by side.

Syncing the WAL file is what ``FULL`` does at a commit: the commit's frames were written to it
before ``COMMIT`` returned, and a checkpoint that copies them into the database file and starts
the WAL over syncs both files first (SQLite does at ``NORMAL`` too). The WAL is never removed
while this process holds a connection, so one descriptor serves the connection's life.
"""

from __future__ import annotations

import os
import weakref

from accelkit.workload.ledger_rows import DB_NAME

__all__ = ["WAL_NAME", "WalSync"]

WAL_NAME = f"{DB_NAME}-wal"


class WalSync:
    """The WAL of the ledger in the state directory ``dir_fd``, opened on the first sync."""

    def __init__(self, dir_fd: int) -> None:
        self._dir_fd = dir_fd
        self._fd: int | None = None
        self._closer: weakref.finalize[[int], WalSync] | None = None

    def sync(self) -> None:
        """``fdatasync`` the WAL: every commit so far survives a power loss (``OSError``)."""
        if self._fd is None:
            flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW
            self._fd = os.open(WAL_NAME, flags, dir_fd=self._dir_fd)
            self._closer = weakref.finalize(self, os.close, self._fd)
        os.fdatasync(self._fd)

    def close(self) -> None:
        """Close the WAL's descriptor (a later :meth:`sync` opens it again)."""
        if self._closer is not None:
            self._closer()
        self._fd = self._closer = None
