"""The container engines a ledger's containers were made on (its ``container_engines`` table).

The docker runtime notes its engine before it creates a container; the orphan sweep
(:mod:`accelkit.workload.orphans`) asks only the engines noted. A ledger that never ran a
container has none, and its reconciliation imports nothing of the sweep.
"""

from __future__ import annotations

import os
import sqlite3
import time
from functools import partial
from typing import TYPE_CHECKING

from accelkit.errors import ConfigError
from accelkit.workload.ledger_rows import optional_rows
from accelkit.workload.state_dir import KEY

if TYPE_CHECKING:
    from accelkit.workload.ledger import Ledger

__all__ = ["container_engines", "missing_socket", "note_container_engine"]

_SCHEMA = "CREATE TABLE IF NOT EXISTS container_engines (url TEXT PRIMARY KEY, since TEXT NOT NULL)"


def _failed(ledger: Ledger, exc: sqlite3.Error) -> ConfigError:
    msg = f"ledger {str(ledger.path)!r}: container engines: {exc}"
    return ConfigError(msg, file=ledger.source, key=KEY)


def container_engines(ledger: Ledger) -> list[str]:
    """The engines this ledger's containers were made on (none: it never ran a container)."""
    rows = optional_rows(
        ledger.db, "SELECT url FROM container_engines ORDER BY url", partial(_failed, ledger)
    )
    return [str(url) for (url,) in rows or ()]


def note_container_engine(ledger: Ledger, url: str) -> None:
    """Note that a container of this ledger is made on the engine at ``url`` (before it is).

    An engine behind a unix socket that does not exist is not noted: nothing can be made
    there, and a note would have every later sweep warn that it cannot reach it.
    """
    if missing_socket(url) is not None or url in container_engines(ledger):
        return  # one read, no write, for every container after the first
    with ledger.transaction():
        try:
            ledger.db.execute(_SCHEMA)
            ledger.db.execute(
                "INSERT OR IGNORE INTO container_engines VALUES (?, ?)",
                (url, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())),
            )
        except sqlite3.Error as exc:
            raise _failed(ledger, exc) from exc


def missing_socket(url: str) -> str | None:
    """The socket path of a ``unix://`` address that does not exist, else ``None``."""
    if not url.startswith("unix://"):
        return None
    path = url.removeprefix("unix://")
    return None if os.path.exists(path) else path
