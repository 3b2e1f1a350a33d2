"""What the ledger reads from files besides its connection: the JSON-file ledger of accelkit
0.2 (imported once) and the records through a read-only connection (``Ledger.read_all``)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accelkit.errors import ConfigError
from accelkit.types import format_amount
from accelkit.workload.ledger_rows import (
    BUSY_TIMEOUT_MS,
    DB_NAME,
    LEGACY_DIR,
    MAX_RECORD_BYTES,
    RecordKey,
    SetAside,
    parse_record,
)
from accelkit.workload.record import LedgerFormatError, LedgerRecord
from accelkit.workload.state_dir import dir_path, secure_file, secure_state_dir

if TYPE_CHECKING:
    from accelkit.workload.ledger import Ledger


def import_legacy(ledger: Ledger, state_dir: Path) -> None:
    """Move the records of the JSON-file ledger (``<state-dir>/ledger/*.json``) in, once.

    Each file becomes a row (an unreadable one goes to ``set_aside``) and the directory is
    renamed ``ledger.imported``, so live workloads keep their devices across the upgrade.
    The directory must be ours like the state directory; symlinks in it are skipped.
    """
    legacy = state_dir / LEGACY_DIR
    try:
        info = os.lstat(legacy)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(info.st_mode):
        return
    secure_state_dir(legacy, source=ledger.source)
    with ledger.transaction():
        for path in sorted(legacy.glob("*.json")):
            if path.name.startswith(".") or path.is_symlink() or not path.is_file():
                continue
            body = path.read_bytes()[: MAX_RECORD_BYTES + 1]
            try:
                record = parse_record(body)
            except LedgerFormatError as exc:
                ledger._set_aside("", path.name, body, f"imported {path.name}: {exc}")
                continue
            if not ledger.exists(*record.key):
                ledger.write(record)
    os.replace(legacy, legacy.with_name(f"{LEGACY_DIR}.imported"))


def read_records(ledger: Ledger, dir_fd: int) -> dict[RecordKey, LedgerRecord]:
    """Every readable record, through a read-only connection of its own (``Ledger.read_all``)."""
    if not secure_file(ledger.path, source=ledger.source, dir_fd=dir_fd):
        return {}
    try:
        rows = _read_rows(dir_fd, "mode=ro")
    except sqlite3.OperationalError as exc:
        wal = dir_path(dir_fd) / f"{DB_NAME}-wal"
        if wal.exists() and wal.stat().st_size:
            msg = "cannot read it"
            raise ledger._error(msg, exc) from exc
        try:
            rows = _read_rows(dir_fd, "mode=ro&immutable=1")
        except sqlite3.Error as again:
            msg = "cannot read it"
            raise ledger._error(msg, again) from again
    except sqlite3.Error as exc:
        msg = "cannot read it"
        raise ledger._error(msg, exc) from exc
    records: dict[RecordKey, LedgerRecord] = {}
    for _agent, _workload, body in rows:
        with contextlib.suppress(LedgerFormatError):
            record = parse_record(body)
            records[record.key] = record
    return records


def _read_rows(dir_fd: int, options: str) -> list[tuple[str, str, Any]]:
    db = sqlite3.connect(f"file:{dir_path(dir_fd) / DB_NAME}?{options}", uri=True)
    try:
        db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        return list(db.execute("SELECT agent, workload, body FROM records").fetchall())
    finally:
        db.close()


def set_aside(ledger: Ledger, agent: str, workload: str, body: Any, reason: str) -> SetAside:
    """Move a row that cannot be read as a record to ``set_aside``; what to report of it."""
    key = (str(agent), str(workload))
    try:
        with ledger.transaction():
            at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            ledger._execute(
                "INSERT INTO set_aside VALUES (?, ?, ?, ?, ?)", (agent, workload, body, reason, at)
            )
            ledger._execute(
                "DELETE FROM records WHERE agent = ? AND workload = ?", (agent, workload)
            )
            ledger._forget(agent, workload)
    except ConfigError:
        return SetAside(key, reason, None)
    return SetAside(key, reason)


def hold_rows(db: sqlite3.Connection, record: LedgerRecord) -> None:
    """The device index entries of ``record`` (none are there for its key)."""
    agent, workload = record.key
    db.executemany(
        "INSERT INTO holdings VALUES (?, ?, ?, ?, ?, ?)",
        [
            (agent, workload, plugin, slot, device, format_amount(amount))
            for plugin, alloc in record.allocation.items()
            for slot, per_device in alloc.items()
            for device, amount in per_device.items()
            if amount
        ],
    )
