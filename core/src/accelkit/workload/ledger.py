"""The allocation ledger: one SQLite database, ``<state-dir>/ledger.db``, in WAL mode.

Conventions:

* a record is one row of ``records``: ``(agent, workload)`` is the key, ``body`` the record's
  JSON text (:meth:`LedgerRecord.to_json`, so ``sqlite3 ledger.db 'select body from records'``
  and ``accelkit status --json`` stay readable), ``seq`` the change counter's value when it was
  last written;
* every change happens in a transaction begun with ``BEGIN IMMEDIATE``, which is the lock between
  accelkit processes: whoever allocates holds it from reading the ledger to writing the new
  record, so two processes on one node can never book the same device. :meth:`Ledger.transaction`
  is re-entrant within one :class:`Ledger` object;
* the change counter (``meta.seq``) grows by one per write or removal; removals are kept in
  ``removals`` with their counter value, so :meth:`Ledger.changes` returns exactly what changed
  since a given value (a sync reads only that, not every record); when the removals needed were
  pruned, it says so and the caller scans everything;
* ``holdings``, every record's amounts per device indexed by device, names who holds a device
  (:meth:`Ledger.holders`) without reading every record;
* SQLite's journal makes every transaction atomic: ``kill -9`` at any instant leaves the ledger
  as it was before or after the transaction, committed ones included. A durable one survives a
  power loss too: the WAL is synced once it committed and the lock is handed on, before the
  caller goes on (:mod:`.ledger_sync`). ``durable=False`` skips the sync, for what a power loss
  may undo without harm, since no workload survives one and reconciliation redoes what is
  missing (a booking no hook has run for, a hook's result, the intents after ``pre_create``'s,
  a handle). The WAL is a sequence, so a sync makes every earlier commit durable too: a run
  syncs the intent of each ``pre_create`` and its release only;
* writers queue for the lock in turn (:mod:`.ledger_queue`), not in SQLite's busy handler;
* the ledger's identity (``identity`` table, :attr:`Ledger.ledger_id`), 32 random hex digits
  made with the database (or first opened by a version that knows it), never changes: the
  docker runtime labels every container with it, so that the orphan sweep tells this ledger's
  containers from another's (:mod:`accelkit.workload.orphans`);
* a row that cannot be read as a record (not JSON, wrong format, over :data:`MAX_RECORD_BYTES`,
  nested deeper than :data:`MAX_RECORD_DEPTH`) is moved to ``set_aside`` and reported, never
  raised and never parsed into a crash;
* the state directory and the database are checked before use (:mod:`accelkit.workload.state_dir`),
  the directory opened once and the database reached through its descriptor, and the identity
  is kept in ``ledger.id`` too: a database emptied, deleted or replaced beside it is refused
  (:mod:`accelkit.workload.ledger_identity`);
* ``held`` keeps, per workload and device, when the booking began to hold the device and when
  it stopped, in the transaction that writes or removes the record (:mod:`.occupancy`);
* JSON only, never pickle.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
import weakref
from collections.abc import Callable, Container, Iterator
from pathlib import Path
from typing import Any, Literal

from accelkit.errors import ConfigError
from accelkit.types import AgentId, DeviceId, DeviceName, SlotName
from accelkit.workload.ledger_files import hold_rows, import_legacy, read_records, set_aside
from accelkit.workload.ledger_identity import write_identity
from accelkit.workload.ledger_open import connect_checked
from accelkit.workload.ledger_queue import WriterQueue
from accelkit.workload.ledger_rows import (
    _SCHEMA,
    BUSY_TIMEOUT_MS,
    DB_NAME,
    MAX_RECORD_BYTES,
    MAX_RECORD_DEPTH,
    REMOVALS_KEPT,
    REPLACE_RECORD,
    UPDATE_RECORD,
    Holding,
    LedgerChanges,
    LedgerScan,
    RecordKey,
    SetAside,
    _patiently,
    changed_rows,
    parse_record,
    record_text,
)
from accelkit.workload.ledger_sync import WalSync
from accelkit.workload.occupancy import note_booking, note_new_booking, note_release
from accelkit.workload.record import LedgerFormatError, LedgerRecord
from accelkit.workload.state_dir import KEY, dir_path, open_state_dir

#: a new record, or nothing where its key is taken (``rowcount`` 0)
INSERT_RECORD = "INSERT OR IGNORE INTO records (agent, workload, seq, body) VALUES (?, ?, ?, ?)"

__all__ = [
    "DB_NAME",
    "MAX_RECORD_BYTES",
    "MAX_RECORD_DEPTH",
    "Holding",
    "Ledger",
    "LedgerChanges",
    "LedgerScan",
    "SetAside",
    "parse_record",
]


class Ledger:
    """The records of one state directory (one database connection per object)."""

    def __init__(self, state_dir: Path | str, *, source: str | None = None) -> None:
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / DB_NAME
        #: the config file naming the state directory, for error messages
        self.source = source
        self._db: sqlite3.Connection | None = None
        self._depth = 0
        self._ledger_id: str | None = None
        self._dir_fd: int | None = None  # the state directory, opened once (open_state_dir)
        #: the writer queue (:mod:`.ledger_queue`); False: not opened yet
        self._queue: WriterQueue | Literal[False] | None = False
        self._wal: WalSync | None = None  # opened at the first durable commit
        #: the counter before and after the last outermost transaction's writes (_next_seq)
        self._writes: tuple[int, int] | None = None
        self._committed: tuple[int, int] | None = None
        #: wall-clock nanoseconds of the held-device intervals (:mod:`.occupancy`)
        self.clock: Callable[[], int] = time.time_ns

    def __repr__(self) -> str:
        return f"Ledger({str(self.path)!r})"

    # -- connection --------------------------------------------------------------------------

    def _error(self, what: str, exc: BaseException) -> ConfigError:
        return ConfigError(f"ledger {str(self.path)!r}: {what}: {exc}", file=self.source, key=KEY)

    @property
    def db(self) -> sqlite3.Connection:
        """The open connection; the state directory, the files and the identity are checked.

        The state directory is opened once (:func:`open_state_dir`) and the database reached
        through its descriptor (:mod:`accelkit.workload.ledger_open` says why that is safe);
        a database that does not carry the identity ``ledger.id`` records is refused.
        """
        if self._db is None:
            dir_fd = self._open_dir()
            try:
                db, recorded = connect_checked(
                    dir_fd,
                    self.state_dir,
                    self.path,
                    source=self.source,
                    busy_timeout_ms=BUSY_TIMEOUT_MS,
                    patiently=_patiently,
                )
            except BaseException as exc:
                self.close()
                if isinstance(exc, sqlite3.Error):
                    raise self._unusable(exc) from exc
                raise
            try:
                _patiently(lambda: db.execute("PRAGMA journal_mode = WAL"))
                db.execute("PRAGMA synchronous = NORMAL")  # durable ones: _sync_level
                _patiently(lambda: db.executescript(f"BEGIN IMMEDIATE; {_SCHEMA} COMMIT;"))
            except sqlite3.Error as exc:
                db.close()
                self.close()
                raise self._unusable(exc) from exc
            self._db = db
            if recorded is None:
                try:
                    write_identity(dir_fd, self.ledger_id)
                except OSError as exc:
                    msg = "cannot record its identity in ledger.id"
                    raise self._error(msg, exc) from exc
            import_legacy(self, dir_path(dir_fd))
        return self._db

    def _unusable(self, exc: sqlite3.Error) -> ConfigError:
        fix = (
            "move the file away if it is not a ledger"
            if "not a database" in str(exc)
            else "check the disk and the file's permissions"
        )
        return self._error(f"cannot use it ({fix})", exc)

    def _open_dir(self) -> int:
        """The state directory's descriptor: this object's, else opened (and created) now."""
        if self._dir_fd is None:
            return self._hold_dir(open_state_dir(self.state_dir, source=self.source))
        return self._dir_fd

    def _hold_dir(self, fd: int) -> int:
        """``fd`` kept, closed by :meth:`close` or when an unclosed ledger is collected."""
        self._dir_fd = fd
        self._dir_closer = weakref.finalize(self, os.close, fd)
        return fd

    def close(self) -> None:
        """Close the connection and the state directory (a later use opens them again)."""
        if self._db is not None:
            self._db.close()
            self._db = None
        if self._queue:
            self._queue.close()
        self._queue = False
        if self._wal is not None:
            self._wal.close()
            self._wal = None
        if self._dir_fd is not None:
            self._dir_closer()
            self._dir_fd = None

    # -- transactions ------------------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self, *, durable: bool = True) -> Iterator[Ledger]:
        """Hold the ledger's write lock (``BEGIN IMMEDIATE``) for the block; re-entrant.

        The block's changes commit together when it ends, and roll back when it raises. With
        ``durable=False`` the commit is not synced to disk (see the module docstring); the
        outermost block decides.
        """
        if self._depth:
            self._depth += 1
            try:
                yield self
            finally:
                self._depth -= 1
            return
        db = self.db
        queue = self._writer_queue()
        with self._sync_level(durable):  # synced after the queue is left
            if queue is not None:  # processes take turns (ledger_queue.py), then SQLite's lock
                queue.enter(BUSY_TIMEOUT_MS / 1000)
            try:
                with self._begun(db):
                    yield self
            finally:
                if queue is not None:
                    queue.leave()

    @property
    def in_transaction(self) -> bool:
        """Whether this object holds the write lock (inside :meth:`transaction`)."""
        return self._depth > 0

    @contextlib.contextmanager
    def _begun(self, db: sqlite3.Connection) -> Iterator[None]:
        """``BEGIN IMMEDIATE``; the block; ``COMMIT``, or ``ROLLBACK`` when it raised."""
        try:
            _patiently(lambda: db.execute("BEGIN IMMEDIATE"))
        except sqlite3.Error as exc:
            msg = "cannot lock it"
            raise self._error(msg, exc) from exc
        self._depth, self._writes = 1, None
        try:
            yield
        except BaseException:
            self._depth = 0
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise
        self._depth = 0
        try:
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            msg = "cannot commit"
            raise self._error(msg, exc) from exc
        self._committed = self._writes

    def past_own(self, since: int) -> int:
        """The counter past the last transaction's own writes when ``since`` is the value it
        began at (under the lock: nobody else wrote between), else ``since``: a sync need not
        read back what its caller just wrote. Outside a transaction only."""
        if self._depth or self._committed is None or self._committed[0] != since:
            return since
        return self._committed[1]

    def _writer_queue(self) -> WriterQueue | None:
        """The state directory's writer queue, opened with the connection's directory."""
        if self._queue is False:
            self._queue = WriterQueue.open(self._open_dir())
        return self._queue

    @contextlib.contextmanager
    def _sync_level(self, durable: bool) -> Iterator[None]:
        """The outermost block (the queue, the transaction), then, when it committed a change
        and is ``durable``, the WAL synced: after the lock is handed on, before the caller goes
        on (a block that only read has nothing to sync)."""
        changes = self.db.total_changes
        yield
        if durable and self.db.total_changes != changes:
            self._wal = self._wal or WalSync(self._open_dir())
            try:
                self._wal.sync()
            except OSError as exc:
                msg = "cannot sync it to disk"
                raise self._error(msg, exc) from exc

    def _execute(self, sql: str, args: tuple[Any, ...] = ()) -> sqlite3.Cursor:
        try:
            return self.db.execute(sql, args)
        except sqlite3.Error as exc:
            msg = "query failed"
            raise self._error(msg, exc) from exc

    # -- reading -----------------------------------------------------------------------------

    @property
    def ledger_id(self) -> str:
        """The ledger's identity: random, made once with the database, kept in it."""
        if self._ledger_id is None:
            row = self._execute("SELECT value FROM identity WHERE name = 'ledger-id'").fetchone()
            self._ledger_id = str(row[0])
        return self._ledger_id

    @property
    def seq(self) -> int:
        """The change counter now."""
        return int(self._execute("SELECT value FROM meta WHERE name = 'seq'").fetchone()[0])

    def _parse_rows(
        self, rows: list[tuple[AgentId, str, Any]]
    ) -> tuple[dict[RecordKey, LedgerRecord], list[SetAside]]:
        records: dict[RecordKey, LedgerRecord] = {}
        problems: list[SetAside] = []
        for agent, workload, body in rows:
            try:
                record = parse_record(body)
                if record.agent_id != agent or record.workload.id != workload:
                    msg = f"holds the record of {record.key!r}, stored under another key"
                    raise LedgerFormatError(msg)
            except LedgerFormatError as exc:
                problems.append(self._set_aside(agent, workload, body, str(exc)))
                continue
            records[agent, workload] = record  # its key, made once
        return records, problems

    def scan(self) -> LedgerScan:
        """Every readable record; unreadable rows are set aside and listed, never raised."""
        with self.transaction():
            rows = self._execute("SELECT agent, workload, body FROM records").fetchall()
            records, problems = self._parse_rows(rows)
            return LedgerScan(records, tuple(problems), self.seq)

    def changes(self, since: int, *, ignore: Container[RecordKey] = ()) -> LedgerChanges:
        """The records written and the keys removed after counter value ``since``.

        Records under a key in ``ignore`` (the caller's own) are neither parsed nor returned.
        """
        with self.transaction():
            # one statement: the lock is held, whoever waits for it waits for this
            rows = changed_rows(self._execute, since, ignore)
            if rows.seq == since:
                return LedgerChanges({}, (), rows.seq)
            if since < rows.pruned:
                return LedgerChanges({}, (), rows.seq, complete=False)
            records, problems = self._parse_rows(rows.written)
            removed = tuple(key for key in rows.removed if key not in records)
            return LedgerChanges(records, removed, rows.seq, set_aside=tuple(problems))

    def read(self, agent_id: str, workload_id: str) -> LedgerRecord | None:
        """The record of one workload, or ``None`` (also when it is unreadable)."""
        row = self._execute(
            "SELECT body FROM records WHERE agent = ? AND workload = ?", (agent_id, workload_id)
        ).fetchone()
        if row is None:
            return None
        try:
            return parse_record(row[0])
        except LedgerFormatError:
            return None

    def exists(self, agent_id: str, workload_id: str) -> bool:
        """Whether the ledger holds a record (readable or not) under this key."""
        row = self._execute(
            "SELECT 1 FROM records WHERE agent = ? AND workload = ?", (agent_id, workload_id)
        ).fetchone()
        return row is not None

    def holders(self, plugin: str, device_ids: list[str]) -> list[Holding]:
        """Who holds what of these devices, from the device index."""
        if not device_ids:
            return []
        marks = ",".join("?" * len(device_ids))
        query = (  # only the placeholders are formatted in
            "SELECT agent, workload, plugin, slot, device, amount FROM holdings "  # noqa: S608
            f"WHERE plugin = ? AND device IN ({marks}) ORDER BY device, agent, workload"
        )
        rows = self._execute(query, (plugin, *device_ids)).fetchall()
        return [
            Holding(AgentId(a), w, DeviceName(p), SlotName(s), DeviceId(d), amount)
            for a, w, p, s, d, amount in rows
        ]

    def read_all(self) -> dict[RecordKey, LedgerRecord]:
        """Every readable record, read only: needs no write access and changes nothing.

        An absent ledger reads as empty. In a directory this process cannot write (a read-only
        mount, say) SQLite cannot make the shared-memory file a WAL reader needs; when no
        writer has left a WAL behind, the database file alone is complete and is read as
        immutable.
        """
        try:
            dir_fd = self._open_dir() if self._db is not None else self._open_existing_dir()
        except FileNotFoundError:
            return {}
        try:
            return self._read_all(dir_fd)
        finally:
            if self._db is None:
                self.close()

    def _open_existing_dir(self) -> int:
        return self._hold_dir(open_state_dir(self.state_dir, source=self.source, create=False))

    def _read_all(self, dir_fd: int) -> dict[RecordKey, LedgerRecord]:
        return read_records(self, dir_fd)

    def set_aside_rows(self) -> list[tuple[str, str, str, str]]:
        """The rows set aside so far: ``(agent, workload, reason, when)``."""
        rows = self._execute("SELECT agent, workload, reason, at FROM set_aside ORDER BY rowid")
        return [(str(a), str(w), str(r), str(t)) for a, w, r, t in rows.fetchall()]

    # -- writing -----------------------------------------------------------------------------

    def _next_seq(self) -> int:
        row = self._execute("UPDATE meta SET value = value + 1 WHERE name = 'seq' RETURNING value")
        seq = int(row.fetchone()[0])
        self._writes = (seq - 1 if self._writes is None else self._writes[0], seq)
        return seq

    def write(self, record: LedgerRecord, *, durable: bool = True, same: bool = False) -> None:
        """Create or replace a workload's record (and its device index entries); ``durable`` as
        for :meth:`transaction`; ``same``: it holds what its recorded version does (row only)."""
        agent, workload = record.key
        body = record_text(record)
        with self.transaction(durable=durable):
            seq = self._next_seq()
            key = (agent, workload)
            if same and self._execute(UPDATE_RECORD, (seq, body, *key)).rowcount:
                return
            self._execute(REPLACE_RECORD, (*key, seq, body))
            self._execute("DELETE FROM holdings WHERE agent = ? AND workload = ?", key)
            hold_rows(self.db, record)
            note_booking(self.db, record, self.clock())

    def create(self, record: LedgerRecord, *, durable: bool = True) -> bool:
        """Write a new workload's record, as :meth:`write`, without reading or clearing what
        an earlier one left (nothing: a removal takes all of it); ``False``, with nothing
        changed, when a record holds its key already."""
        with self.transaction(durable=durable):
            seq = self._next_seq()
            row = (*record.key, seq, record_text(record))
            if not self._execute(INSERT_RECORD, row).rowcount:
                self._execute("UPDATE meta SET value = ? WHERE name = 'seq'", (seq - 1,))
                self._writes = (self._writes[0], seq - 1) if self._writes else None
                return False
            hold_rows(self.db, record)
            note_new_booking(self.db, record, self.clock())
            return True

    def remove(self, agent_id: str, workload_id: str) -> bool:
        """Delete a workload's record; ``False`` when there was none."""
        with self.transaction():
            gone = self._execute(
                "DELETE FROM records WHERE agent = ? AND workload = ?", (agent_id, workload_id)
            ).rowcount
            if not gone:
                return False
            self._forget(agent_id, workload_id)
            return True

    def _forget(self, agent_id: str, workload_id: str) -> None:
        self._execute(
            "DELETE FROM holdings WHERE agent = ? AND workload = ?", (agent_id, workload_id)
        )
        note_release(self.db, agent_id, workload_id, self.clock())
        seq = self._next_seq()
        self._execute("INSERT INTO removals VALUES (?, ?, ?)", (seq, agent_id, workload_id))
        if seq % 1000 == 0 and seq > REMOVALS_KEPT:
            self._execute("DELETE FROM removals WHERE seq <= ?", (seq - REMOVALS_KEPT,))
            self._execute("UPDATE meta SET value = ? WHERE name = 'pruned'", (seq - REMOVALS_KEPT,))

    def _set_aside(self, agent: str, workload: str, body: Any, reason: str) -> SetAside:
        return set_aside(self, agent, workload, body, reason)
