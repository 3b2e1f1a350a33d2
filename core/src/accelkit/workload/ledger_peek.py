"""What changed in the ledger, read from a snapshot without its write lock.

A booking applies what other processes wrote since its last look before it allocates. Read in
the booking's transaction, that work holds every other writer out; with four processes booking
at once each booking had several records of the others to parse and apply there. The
bookkeeper therefore catches up first from a snapshot (one statement outside any transaction:
in WAL mode it reads a snapshot of its own, waits for nobody and keeps nobody out) and then,
in the transaction, only with what was written in between.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Container
from typing import TYPE_CHECKING, Protocol

from accelkit.workload.ledger_rows import LedgerChanges, RecordKey, changed_rows, parse_record
from accelkit.workload.reconcile_report import ReconcileReport
from accelkit.workload.record import LedgerFormatError, LedgerRecord

if TYPE_CHECKING:
    from accelkit.workload.ledger import Ledger
    from accelkit.workload.reconcile import Reconciler


class Keeper(Protocol):
    """What :func:`catch_up_early` reads of the bookkeeper."""

    owned: dict[RecordKey, LedgerRecord]
    _finishing: set[RecordKey]


def catch_up_early(
    ledger: Ledger, seq: int, keeper: Keeper, reconciler: Reconciler
) -> tuple[int, ReconcileReport]:
    """Apply what changed since ``seq`` from a snapshot; the counter reached and the report
    (``seq`` and an empty report when the snapshot cannot tell: the transaction reads all)."""
    changes = peek_changes(ledger, seq, ignore=keeper.owned) if seq >= 0 else None
    if changes is None:
        return seq, ReconcileReport()
    owned, skip = keeper.owned, frozenset(keeper._finishing)
    return changes.seq, reconciler.apply_changes(changes.records, changes.removed, owned, skip)


def peek_changes(
    ledger: Ledger, since: int, *, ignore: Container[RecordKey] = ()
) -> LedgerChanges | None:
    """:meth:`Ledger.changes` from a snapshot, without the write lock; ``None`` inside a
    transaction, when removals that far back were pruned, or when a row cannot be read (the
    locked :meth:`Ledger.changes` sets it aside)."""
    if ledger.in_transaction:
        return None
    db = ledger.db
    if db.in_transaction:  # a read of the caller's own: not a snapshot of its own
        return None
    try:  # one statement (autocommit): its own read snapshot, begun and ended with it
        return _read(db, since, ignore)
    except sqlite3.Error:  # the locked read says what is wrong
        return None


def _read(db: sqlite3.Connection, since: int, ignore: Container[RecordKey]) -> LedgerChanges | None:
    rows = changed_rows(db.execute, since, ignore)
    if rows.seq == since:
        return LedgerChanges({}, (), rows.seq)
    if since < rows.pruned:
        return None
    records: dict[RecordKey, LedgerRecord] = {}
    for agent, workload, body in rows.written:
        try:
            record = parse_record(body)
        except LedgerFormatError:
            return None
        if record.key != (agent, workload):
            return None
        records[record.key] = record
    removed = tuple(key for key in rows.removed if key not in records)
    return LedgerChanges(records, removed, rows.seq)
