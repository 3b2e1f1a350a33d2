"""Health notes in the allocation ledger: what happened to the devices a workload holds.

When a device that workloads hold turns unhealthy (or is cordoned), each of them gets a note
in the ledger's ``health_notes`` table, kept while its record is: ``accelkit status`` shows
them next to the workload, from any process. Notes of records that are gone are pruned when
notes are written.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from functools import partial

import attrs

from accelkit.errors import ConfigError
from accelkit.reprs import attrs_eq, attrs_hash, attrs_repr
from accelkit.types import AgentId
from accelkit.workload.ledger import Ledger
from accelkit.workload.ledger_rows import optional_rows
from accelkit.workload.state_dir import KEY

__all__ = ["HealthNote", "add_notes", "latest_unhealthy", "read_notes"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS health_notes (
    agent TEXT NOT NULL, workload TEXT NOT NULL, at TEXT NOT NULL,
    plugin TEXT NOT NULL, device TEXT NOT NULL, state TEXT NOT NULL, text TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS health_notes_by_record ON health_notes (agent, workload);
"""

#: notes kept per workload (the latest)
MAX_NOTES = 20


@attrs.frozen(repr=False)
class HealthNote:
    """A device of a workload changed health: when (epoch seconds), which, to what, why."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    agent: AgentId
    workload_id: str
    at: str
    plugin: str
    device: str
    state: str
    text: str

    def to_json(self) -> dict[str, str]:
        """The shape ``accelkit status --json`` prints in a workload's ``notes``."""
        return {
            "at": self.at,
            "plugin": self.plugin,
            "device": self.device,
            "state": self.state,
            "text": self.text,
        }


def _fail(ledger: Ledger, exc: sqlite3.Error) -> ConfigError:
    msg = f"ledger {str(ledger.path)!r}: health notes: {exc}"
    return ConfigError(msg, file=ledger.source, key=KEY)


def add_notes(ledger: Ledger, notes: Iterable[HealthNote]) -> list[HealthNote]:
    """Record ``notes`` (synced), keeping the latest :data:`MAX_NOTES` per workload.

    A note that says what the workload's latest note on that device already says is skipped
    (every accelkit process that starts sees the same change): the notes actually added.
    """
    notes = list(notes)
    if not notes:
        return []
    added: list[HealthNote] = []
    with ledger.transaction():
        try:
            for statement in filter(None, (s.strip() for s in _SCHEMA.split(";"))):
                ledger.db.execute(statement)
            for n in notes:
                latest = ledger.db.execute(
                    "SELECT state, text FROM health_notes WHERE agent = ? AND workload = ?"
                    " AND plugin = ? AND device = ? ORDER BY rowid DESC LIMIT 1",
                    (n.agent, n.workload_id, n.plugin, n.device),
                ).fetchone()
                if latest is not None and tuple(latest) == (n.state, n.text):
                    continue
                ledger.db.execute(
                    "INSERT INTO health_notes VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (n.agent, n.workload_id, n.at, n.plugin, n.device, n.state, n.text),
                )
                added.append(n)
            ledger.db.execute(
                "DELETE FROM health_notes WHERE NOT EXISTS (SELECT 1 FROM records AS r"
                " WHERE r.agent = health_notes.agent AND r.workload = health_notes.workload)"
            )
            ledger.db.execute(
                "DELETE FROM health_notes WHERE rowid NOT IN (SELECT rowid FROM health_notes AS n"
                " WHERE n.agent = health_notes.agent AND n.workload = health_notes.workload"
                " ORDER BY rowid DESC LIMIT ?)",
                (MAX_NOTES,),
            )
        except sqlite3.Error as exc:
            raise _fail(ledger, exc) from exc
    return added


def read_notes(ledger: Ledger) -> dict[tuple[str, str], list[HealthNote]]:
    """Every workload's notes, oldest first, by ``(agent, workload id)``."""
    rows = optional_rows(
        ledger.db,
        "SELECT agent, workload, at, plugin, device, state, text FROM health_notes ORDER BY rowid",
        partial(_fail, ledger),
    )
    notes: dict[tuple[str, str], list[HealthNote]] = {}
    for agent, workload, at, plugin, device, state, text in rows or ():
        note = HealthNote(AgentId(agent), workload, at, plugin, device, state, text)
        notes.setdefault((agent, workload), []).append(note)
    return notes


def latest_unhealthy(ledger: Ledger) -> list[HealthNote]:
    """For each workload and device, its latest note where that note says ``unhealthy``.

    A process that starts after a device recovered sees no change (its board starts healthy);
    these are the notes it must follow with a recovery note, so the next loss is news again.
    """
    rows = optional_rows(
        ledger.db,
        "SELECT agent, workload, at, plugin, device, state, text FROM health_notes AS n"
        " WHERE rowid = (SELECT MAX(rowid) FROM health_notes AS m WHERE m.agent = n.agent"
        " AND m.workload = n.workload AND m.plugin = n.plugin AND m.device = n.device)"
        " AND state = 'unhealthy'",
        partial(_fail, ledger),
    )
    return [HealthNote(AgentId(a), w, at, p, d, s, t) for a, w, at, p, d, s, t in rows or ()]
