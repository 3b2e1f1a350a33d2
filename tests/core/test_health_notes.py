"""Health notes in the ledger: deduplicated, bounded per workload, gone with their record."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from accelkit.errors import ConfigError
from accelkit.node.health_notes import MAX_NOTES, HealthNote, add_notes, read_notes
from accelkit.types import AgentId, DeviceAllocation, DeviceName, Workload, WorkloadType
from accelkit.workload import Ledger, LedgerRecord

AGENT = AgentId("agent-1")


def record(ledger: Ledger, workload: str) -> None:
    allocation: dict[DeviceName, DeviceAllocation] = {DeviceName("cuda"): {}}
    ledger.write(LedgerRecord(AGENT, Workload(workload, WorkloadType.PROCESS_TREE), allocation))


def note(workload: str, text: str, state: str = "unhealthy", device: str = "cuda0") -> HealthNote:
    return HealthNote(AGENT, workload, "1700000000", "cuda", device, state, text)


def test_a_ledger_without_notes_reads_none(tmp_path: Path) -> None:
    assert read_notes(Ledger(tmp_path)) == {}
    assert add_notes(Ledger(tmp_path), []) == []


def test_the_same_news_twice_is_noted_once_and_news_again_after_a_change(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    record(ledger, "w")
    bad, good = note("w", "turned unhealthy: XID"), note("w", "turned healthy", "healthy")
    assert add_notes(ledger, [bad]) == [bad]
    assert add_notes(Ledger(tmp_path), [bad]) == []  # another process, the same change
    assert add_notes(ledger, [good, bad]) == [good, bad]
    assert [n.text for n in read_notes(ledger)[(AGENT, "w")]] == [
        bad.text,
        good.text,
        bad.text,
    ]


def test_notes_are_bounded_per_workload_and_pruned_with_their_record(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    record(ledger, "w")
    record(ledger, "gone")
    add_notes(ledger, [note("gone", "turned unhealthy")])
    ledger.remove(AGENT, "gone")
    for i in range(MAX_NOTES + 5):
        add_notes(ledger, [note("w", f"turned unhealthy #{i}")])
    notes = read_notes(ledger)
    assert list(notes) == [(AGENT, "w")]
    assert len(notes[(AGENT, "w")]) == MAX_NOTES
    assert notes[(AGENT, "w")][-1].text == f"turned unhealthy #{MAX_NOTES + 4}"


def test_a_damaged_notes_table_is_a_config_error_naming_the_ledger(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    ledger.db.execute("CREATE TABLE health_notes (agent TEXT)")
    with pytest.raises(ConfigError, match=r"ledger .*health notes"):
        read_notes(ledger)
    with pytest.raises(ConfigError, match=r"ledger .*health notes"):
        add_notes(ledger, [note("w", "x")])
    assert isinstance(ledger.db, sqlite3.Connection)
