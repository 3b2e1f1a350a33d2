"""A booking catches up from a snapshot before its transaction: the same changes, no lock."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

from accelkit.types import AgentId, DeviceName, Workload
from accelkit.workload import Ledger, LedgerRecord
from accelkit.workload.ledger_peek import peek_changes


def record(workload: str, device: str = "0") -> LedgerRecord:
    return LedgerRecord(
        AgentId("agent-1"),
        Workload.process_tree(workload),
        allocation={DeviceName("cpu"): {"cpu": {device: Decimal(1)}}},
        order=(DeviceName("cpu"),),
    )


def test_the_snapshot_reads_what_the_locked_read_reads(tmp_path: Path) -> None:
    writer, reader = Ledger(tmp_path), Ledger(tmp_path)
    since = reader.seq
    writer.write(record("pid:1"))
    writer.write(record("pid:2", "1"))
    writer.remove("agent-1", "pid:1")
    writer.write(record("pid:3", "2"))
    peeked = peek_changes(reader, since, ignore={(AgentId("agent-1"), "pid:3")})
    assert peeked == reader.changes(since, ignore={(AgentId("agent-1"), "pid:3")})
    assert peeked is not None
    assert set(peeked.records) == {("agent-1", "pid:2")}
    assert peeked.removed == (("agent-1", "pid:1"),)


def test_the_snapshot_holds_no_lock_and_waits_for_none(tmp_path: Path) -> None:
    writer, reader = Ledger(tmp_path), Ledger(tmp_path)
    since = reader.seq
    with writer.transaction():  # another writer holds the lock: the snapshot still reads
        writer.write(record("pid:1"))
        peeked = peek_changes(reader, since)
        assert peeked is not None
        assert peeked.records == {}  # not committed yet
    peeked = peek_changes(reader, since)
    assert peeked is not None
    assert set(peeked.records) == {("agent-1", "pid:1")}
    with reader.transaction():  # a writer may write after it: the snapshot ended
        reader.write(record("pid:2", "1"))


def test_the_snapshot_leaves_unreadable_rows_and_pruned_counters_to_the_locked_read(
    tmp_path: Path,
) -> None:
    ledger = Ledger(tmp_path)
    since = ledger.seq
    ledger.write(record("pid:1"))
    with ledger.transaction():
        ledger.db.execute("UPDATE records SET body = 'not json' WHERE workload = 'pid:1'")
    assert peek_changes(ledger, since) is None
    with ledger.transaction():
        assert peek_changes(ledger, since) is None  # inside a transaction: the caller reads
    ledger.db.execute("UPDATE meta SET value = 5 WHERE name = 'pruned'")
    assert peek_changes(ledger, 0) is None
    assert ledger.changes(0).complete is False


def test_the_snapshot_is_one_statement_of_its_own(tmp_path: Path) -> None:
    """No BEGIN and COMMIT around it: one statement outside a transaction reads a snapshot
    of its own, and each statement costs more after another process wrote."""
    writer, reader = Ledger(tmp_path), Ledger(tmp_path)
    since = reader.seq
    writer.write(record("pid:1"))
    statements: list[str] = []
    reader.db.set_trace_callback(statements.append)
    peeked = peek_changes(reader, since)
    reader.db.set_trace_callback(None)
    assert peeked is not None
    assert set(peeked.records) == {("agent-1", "pid:1")}
    assert len(statements) == 1
    assert statements[0].startswith("SELECT")
    assert not reader.db.in_transaction
