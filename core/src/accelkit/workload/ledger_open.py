"""Opening the ledger's database through the state directory's descriptor (DESIGN §17, §18).

:func:`connect_checked` checks the files (:func:`~accelkit.workload.state_dir.secure_file`),
refuses a database that does not carry the identity ``ledger.id`` records
(:mod:`accelkit.workload.ledger_identity`) before anything is written to it, and connects.

SQLite needs a path, so the database is reached as ``/proc/self/fd/N/ledger.db``, N being the
state directory's descriptor. SQLite resolves that link itself (to the name the kernel gives
the directory the descriptor holds, where it is now), so the database opened is the one in the
directory that was checked, whatever has been done to the configured path since: a symbolic
link swapped to another directory is never followed again. Only root or we could rename that
directory or its parents in between (:func:`~accelkit.workload.state_dir.open_state_dir`
refuses a path others can write).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from accelkit.workload.ledger_identity import check_identity, database_identity, read_identity
from accelkit.workload.state_dir import dir_path, secure_file

__all__ = ["connect_checked"]


def connect_checked(
    dir_fd: int,
    state_dir: Path,
    database: Path,
    *,
    source: str | None,
    busy_timeout_ms: int,
    patiently: Callable[[Callable[[], object]], None],
) -> tuple[sqlite3.Connection, str | None]:
    """The connection to ``database`` (``state_dir``'s, opened as ``dir_fd``) and the identity
    ``ledger.id`` records (``None``: none yet, the caller records the database's).

    Raises ``ConfigError`` for an unsafe file or a database of another identity, and
    ``sqlite3.Error`` from SQLite.
    """
    recorded = read_identity(dir_fd, state_dir, source=source)
    exists = secure_file(database, source=source, dir_fd=dir_fd)
    if recorded is not None and not exists:
        check_identity(recorded, None, database, source=source)  # deleted: refused
    secure_file(database, source=source, create=True, dir_fd=dir_fd)
    for suffix in ("-wal", "-shm", "-journal"):
        secure_file(Path(f"{database}{suffix}"), source=source, dir_fd=dir_fd)
    db = sqlite3.connect(
        dir_path(dir_fd) / database.name, isolation_level=None, check_same_thread=False
    )
    try:
        db.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
        if recorded is not None:  # before anything is written to it
            found: list[str | None] = []
            patiently(lambda: found.append(database_identity(db)))
            check_identity(recorded, found[-1], database, source=source)
    except BaseException:
        db.close()
        raise
    return db, recorded
