"""The ledger's identity kept in a second place: ``<state-dir>/ledger.id`` (DESIGN §18).

The ledger's identity (:attr:`accelkit.workload.Ledger.ledger_id`, 32 random hex digits made
with the database) labels what its workloads run in. Were ``ledger.db`` emptied, deleted or
replaced while workloads run, a new database would be taken for a new, empty ledger and their
devices granted again. So the identity is also written to ``ledger.id`` beside the database
when the state directory first gets a ledger (or is first opened by a version that knows the
file), and every later opening checks that the database carries it: a database without it, or
with another, is refused naming both, before anything is written to it.

The operator who knows that no workload of the old ledger runs any more (no container labelled
``io.accelkit.ledger=<old id>``, no process of its workloads) removes ``ledger.id``; the next
opening then takes the database as it is and records its identity.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from accelkit.errors import ConfigError
from accelkit.workload.state_dir import KEY, secure_file

__all__ = ["ID_FILE", "check_identity", "database_identity", "read_identity", "write_identity"]

ID_FILE = "ledger.id"
#: what a ledger.id may hold at most (32 hex digits and a newline)
_MAX_BYTES = 128


def read_identity(dir_fd: int, state_dir: Path, *, source: str | None = None) -> str | None:
    """The identity ``ledger.id`` records; ``None`` when there is no such file."""
    shown = state_dir / ID_FILE
    if not secure_file(shown, source=source, dir_fd=dir_fd):
        return None
    fd = os.open(ID_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        text = os.read(fd, _MAX_BYTES).decode("ascii", "replace").strip()
    finally:
        os.close(fd)
    if not text or not all(c in "0123456789abcdef" for c in text):
        msg = (
            f"{str(shown)!r} holds no ledger identity ({text[:40]!r}); restore it, or remove it "
            "if no workload of this node's ledger runs any more"
        )
        raise ConfigError(msg, file=source, key=KEY)
    return text


def write_identity(dir_fd: int, ledger_id: str) -> None:
    """Record ``ledger_id`` in ``ledger.id`` (written aside, synced, then renamed in place)."""
    aside = f".{ID_FILE}.{os.getpid()}.{os.urandom(4).hex()}"  # one per writer, threads too
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(aside, flags, 0o600, dir_fd=dir_fd)
    try:
        os.write(fd, f"{ledger_id}\n".encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(aside, ID_FILE, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    os.fsync(dir_fd)


def database_identity(db: sqlite3.Connection) -> str | None:
    """The identity a database carries; ``None`` for one without (empty, new, not a ledger)."""
    found = db.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'identity'"
    ).fetchone()
    if found is None:
        return None
    row = db.execute("SELECT value FROM identity WHERE name = 'ledger-id'").fetchone()
    return None if row is None else str(row[0])


def check_identity(
    recorded: str, found: str | None, database: Path, *, source: str | None = None
) -> None:
    """Refuse a database that does not carry the identity ``ledger.id`` records."""
    if found == recorded:
        return
    what = "carries none" if found is None else f"is ledger {found}"
    msg = (
        f"ledger {str(database)!r} is not this node's ledger: {ID_FILE} says {recorded}, the "
        f"database {what}; it was emptied, deleted or replaced, and workloads booked in ledger "
        f"{recorded} (containers labelled io.accelkit.ledger={recorded}, their processes) may "
        "still hold devices. Restore the database; or, once none of them runs, remove "
        f"{str(database.with_name(ID_FILE))!r} to start a new ledger"
    )
    raise ConfigError(msg, file=source, key=KEY)
