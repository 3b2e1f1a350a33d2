"""The ledger's tables, row types and record text (:mod:`accelkit.workload.ledger` uses them)."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Container
from operator import itemgetter
from typing import Any

import attrs

from accelkit.reprs import attrs_eq, attrs_hash, attrs_repr
from accelkit.types import AgentId, DeviceId, DeviceName, SlotName
from accelkit.workload.occupancy import SCHEMA as OCCUPANCY_SCHEMA
from accelkit.workload.record import LedgerFormatError, LedgerRecord

DB_NAME = "ledger.db"
#: the directory of the JSON-file ledger of accelkit 0.2, imported on first use
LEGACY_DIR = "ledger"
#: a record larger than this (bytes of JSON) is set aside unread
MAX_RECORD_BYTES = 1 << 20
#: a record nested deeper than this is set aside unread (a valid one nests 4 levels)
MAX_RECORD_DEPTH = 32
#: removals kept for incremental syncs; a process further behind scans everything
REMOVALS_KEPT = 10_000
#: how long a transaction waits for another process's (SQLite busy timeout)
BUSY_TIMEOUT_MS = 120_000
#: a record's row, written in full, and its body alone (its devices unchanged)
REPLACE_RECORD = "INSERT OR REPLACE INTO records (agent, workload, seq, body) VALUES (?, ?, ?, ?)"
UPDATE_RECORD = "UPDATE records SET seq = ?, body = ? WHERE agent = ? AND workload = ?"

_SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO meta VALUES ('seq', 0), ('pruned', 0);
CREATE TABLE IF NOT EXISTS records (
    agent TEXT NOT NULL, workload TEXT NOT NULL, seq INTEGER NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY (agent, workload));
CREATE INDEX IF NOT EXISTS records_by_seq ON records (seq);
CREATE TABLE IF NOT EXISTS removals (
    seq INTEGER PRIMARY KEY, agent TEXT NOT NULL, workload TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS holdings (
    agent TEXT NOT NULL, workload TEXT NOT NULL, plugin TEXT NOT NULL, slot TEXT NOT NULL,
    device TEXT NOT NULL, amount TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS holdings_by_device ON holdings (plugin, device);
CREATE INDEX IF NOT EXISTS holdings_by_record ON holdings (agent, workload);
CREATE TABLE IF NOT EXISTS set_aside (
    agent TEXT, workload TEXT, body BLOB, reason TEXT NOT NULL, at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS identity (name TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT OR IGNORE INTO identity VALUES ('ledger-id', lower(hex(randomblob(16))));
"""
    + OCCUPANCY_SCHEMA
)

RecordKey = tuple[AgentId, str]


@attrs.frozen(repr=False)
class SetAside:
    """A ledger row that could not be read and was moved to the ``set_aside`` table."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    key: tuple[str, str]
    reason: str
    moved_to: str | None = "set_aside"

    @property
    def name(self) -> str:
        """``agent+workload``, for messages."""
        return f"{self.key[0]}+{self.key[1]}"


@attrs.frozen(repr=False)
class LedgerScan:
    """The readable records, by ``(agent, workload id)``, the rows set aside, the counter."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    records: dict[RecordKey, LedgerRecord]
    set_aside: tuple[SetAside, ...] = ()
    seq: int = 0


@attrs.frozen(repr=False)
class LedgerChanges:
    """What changed since a counter value: records written, keys removed, the counter now.

    ``complete`` is false when removals that far back were pruned: scan everything instead.
    """

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    records: dict[RecordKey, LedgerRecord]
    removed: tuple[RecordKey, ...]
    seq: int
    complete: bool = True
    set_aside: tuple[SetAside, ...] = ()


@attrs.frozen(repr=False)
class Holding:
    """One record's amount on one device, from the device index."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    agent_id: AgentId
    workload_id: str
    plugin: DeviceName
    slot: SlotName
    device_id: DeviceId
    amount: str


#: what changed after a counter value, in one statement (each one is paid again after another
#: process wrote, SQLite's cache being dropped then): the counters, the records written since
#: and the keys removed since, each row with its kind (0, 1, 2) and its counter value
_CHANGES_SINCE = (
    "SELECT 0, name, value, NULL, 0 FROM meta WHERE name IN ('seq', 'pruned') "
    "UNION ALL SELECT 1, agent, workload, body, seq FROM records WHERE seq > ? "
    "UNION ALL SELECT 2, agent, workload, NULL, seq FROM removals WHERE seq > ?"
)


@attrs.frozen
class ChangedRows:
    """The rows of :data:`_CHANGES_SINCE`, unparsed: the counters; ``(agent, workload, body)``
    of each record written and the key of each removal, both in the order written."""

    seq: int
    pruned: int
    written: list[tuple[AgentId, str, Any]]
    removed: list[RecordKey]


def changed_rows(
    execute: Callable[[str, tuple[Any, ...]], sqlite3.Cursor],
    since: int,
    ignore: Container[RecordKey] = (),
) -> ChangedRows:
    """What changed after ``since`` (records under a key in ``ignore`` left out), read with
    ``execute`` (a connection's, or the ledger's, which names the ledger in its errors) in the
    caller's transaction or snapshot; any error as ``execute`` raises it."""
    counters: dict[str, int] = {}
    written: list[tuple[int, AgentId, str, Any]] = []
    removed: list[tuple[int, RecordKey]] = []
    for kind, first, second, body, seq in execute(_CHANGES_SINCE, (since, since)).fetchall():
        if kind == 0:
            counters[str(first)] = int(second)
        elif kind == 1:
            if (first, second) not in ignore:
                written.append((seq, first, second, body))
        else:
            removed.append((seq, (AgentId(first), str(second))))
    written.sort(key=itemgetter(0))
    removed.sort(key=itemgetter(0))
    return ChangedRows(
        counters["seq"],
        counters["pruned"],
        [(agent, workload, body) for _, agent, workload, body in written],
        [key for _, key in removed],
    )


def optional_rows(
    db: sqlite3.Connection,
    sql: str,
    fail: Callable[[sqlite3.Error], Exception],
    args: tuple[Any, ...] = (),
) -> list[Any] | None:
    """The rows of ``sql``, a read of a table made on first use (container engines, health
    notes); ``None`` when the table does not exist yet. Any other error raises what ``fail``
    makes of it (a ``ConfigError`` naming the ledger)."""
    try:
        return db.execute(sql, args).fetchall()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return None
        raise fail(exc) from exc
    except sqlite3.Error as exc:
        raise fail(exc) from exc


def _patiently(step: Callable[[], object]) -> None:
    """Run ``step``, again while the database is busy (up to the busy timeout).

    SQLite answers some lock conflicts at once, without its busy handler: switching to WAL or
    recovering the WAL of a process killed mid-write while another process opens the ledger.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    delay = 0.001
    while True:
        try:
            step()
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            if time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
            continue
        return


def _depth(text: str) -> int:
    """The deepest nesting of ``[``/``{`` in JSON text, strings skipped."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def parse_record(body: str | bytes) -> LedgerRecord:
    """A record from its JSON text; :class:`LedgerFormatError` for anything else.

    Text over :data:`MAX_RECORD_BYTES` or nested deeper than :data:`MAX_RECORD_DEPTH` is refused
    before it is parsed.
    """
    size = len(body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body)
    if size > MAX_RECORD_BYTES:
        msg = f"record of {size} bytes is larger than the limit of {MAX_RECORD_BYTES}"
        raise LedgerFormatError(msg)
    try:
        text = body if isinstance(body, str) else body.decode("utf-8")
    except UnicodeDecodeError as exc:
        msg = f"unreadable ({type(exc).__name__}: {exc})"
        raise LedgerFormatError(msg) from None
    # fewer brackets than the limit cannot nest beyond it: a record's dozen skips the walk
    opened = text.count("{") + text.count("[")
    if opened > MAX_RECORD_DEPTH and (depth := _depth(text)) > MAX_RECORD_DEPTH:
        msg = f"record nested {depth} levels deep, beyond the limit of {MAX_RECORD_DEPTH}"
        raise LedgerFormatError(msg)
    try:
        data = _loads(text)
    except ValueError as exc:
        msg = f"unreadable ({type(exc).__name__}: {exc})"
        raise LedgerFormatError(msg) from None
    return LedgerRecord.from_json(data)


#: the C scanner that ``json.loads`` ends in, for the text :func:`record_text` writes
_scan: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # not in the stubs


def _loads(text: str) -> Any:
    """``json.loads(text)``: a record as written (one object, nothing around it) goes to the
    scanner directly, which skips the wrapper's checks, a fifth of the time of a record's JSON
    at thousands of records; anything else (and any error) is ``json.loads``'s to answer."""
    if text[:1] == "{":
        try:
            data, end = _scan(text, 0)
        except (StopIteration, ValueError):
            pass
        else:
            if end == len(text):
                return data
    return json.loads(text)


def record_text(record: LedgerRecord) -> str:
    """The JSON text a record is stored as."""
    return json.dumps(record.to_json(), sort_keys=True, separators=(",", ":"))
