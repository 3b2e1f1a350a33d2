"""The config a ledger was last opened with: a digest and the file's name, kept in the ledger.

Processes of one node that read different configs partition the node differently over the
same ledger. Held devices stay held whatever the partition (:mod:`accelkit.workload.node_wide`),
but an operator should know that two configs are in use: each node that opens the ledger
records the digest of its config (the keys that decide the partition and the plugins: not
comments, not the order of keys) and the file it read, and is told when the previous one
differs, naming both files.
"""

from __future__ import annotations

import enum
import hashlib
import json
import sqlite3
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path, PurePath
from typing import Any

import attrs

from accelkit.config.model import HostConfig
from accelkit.reprs import attrs_eq, attrs_hash, attrs_repr
from accelkit.workload.ledger import Ledger

__all__ = ["ConfigSeen", "config_digest", "note_config"]

_SCHEMA = "CREATE TABLE IF NOT EXISTS opened_with (name TEXT PRIMARY KEY, value TEXT NOT NULL)"


@attrs.frozen(repr=False)
class ConfigSeen:
    """A config as the ledger remembers it: its digest and the file it came from."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    digest: str
    source: str

    def differs(self, now: ConfigSeen) -> str | None:
        """A warning when ``now`` is another config than this one, else ``None``."""
        if now.digest == self.digest:
            return None
        return (
            f"this ledger was last opened with another config ({self.source}, digest "
            f"{self.digest[:12]}) than this command reads ({now.source}, digest "
            f"{now.digest[:12]}); devices held under either partition stay held (see "
            "'accelkit check')"
        )


def _plain(value: Any) -> Any:
    """``value`` as JSON data, the same for equal configs."""
    if attrs.has(type(value)):
        return {f.name: _plain(getattr(value, f.name)) for f in attrs.fields(type(value))}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, frozenset | set):
        return sorted(str(v) for v in value)
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Decimal | PurePath | enum.Enum):
        return str(value)
    return value


def config_digest(config: HostConfig) -> ConfigSeen:
    """The digest of what in ``config`` decides the partition and the plugins."""
    resource = attrs.evolve(config.resource, state_dir=Path("."))  # the same ledger anyway
    plugins = attrs.evolve(config.plugins, source=None)
    data = {"resource": resource, "agents": config.agents, "plugins": plugins}
    text = json.dumps(_plain(data), sort_keys=True, separators=(",", ":"))
    return ConfigSeen(hashlib.sha256(text.encode()).hexdigest(), config.source_name)


def note_config(ledger: Ledger, now: ConfigSeen) -> ConfigSeen | None:
    """Record ``now`` as the ledger's config; the one recorded before (``None``: none).

    A ledger that already says ``now`` (a node opened again on the same file, the common
    case) is only read: no write lock taken, nothing committed.
    """
    try:
        seen = dict(ledger.db.execute("SELECT name, value FROM opened_with").fetchall())
    except sqlite3.OperationalError:  # no such table yet: the first opening records it
        seen = {}
    if seen.get("digest") == now.digest and seen.get("source") == now.source:
        return now
    with ledger.transaction(durable=False):  # a note for the operator, not a booking
        db = ledger.db
        db.execute(_SCHEMA)
        rows = dict(db.execute("SELECT name, value FROM opened_with").fetchall())
        db.executemany(
            "INSERT OR REPLACE INTO opened_with VALUES (?, ?)",
            [("digest", now.digest), ("source", now.source)],
        )
    if "digest" not in rows:
        return None
    return ConfigSeen(str(rows["digest"]), str(rows.get("source", "<unknown>")))
