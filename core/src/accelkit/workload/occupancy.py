"""Occupancy: how long each device was held, by whom, from the ledger's own bookings.

The ledger keeps, beside its records, one row per device a workload holds (table ``held``):
the time the booking first named the device and, once the record is removed (the workload
released, set aside) or rewritten without the device, the time it stopped. Rows are written in
the transaction that writes or removes the record, so a booking and its interval commit or
roll back together; closed rows are kept, so the seconds a device was held only ever grow (a
counter, ``accelkit_device_held_seconds_total``). Times are the ledger's clock
(:attr:`~accelkit.workload.Ledger.clock`, wall-clock nanoseconds), so intervals outlive the
process that booked them.

A device held for any amount counts in full for each holder: two workloads sharing a GPU each
hold it for their own seconds. Each interval names its entry point, from the workload id:
``claim`` (``k8s-claim:``, a DRA claim), ``pod`` (``k8s:``, the device plugin), ``slurm``
(``slurm:``) and ``run`` (everything else: ``accelkit run``, the process and docker runtimes).
Bookings made before this table existed count from the first write of their record after it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING

import attrs

from accelkit.reprs import attrs_eq, attrs_hash, attrs_repr
from accelkit.types import DeviceId
from accelkit.workload.record import LedgerRecord

if TYPE_CHECKING:
    from accelkit.workload.ledger import Ledger

__all__ = [
    "SCHEMA",
    "HeldSeconds",
    "entry_point",
    "held_now",
    "held_seconds",
    "note_booking",
    "note_release",
    "read_held",
]

SCHEMA = """
CREATE TABLE IF NOT EXISTS held (
    agent TEXT NOT NULL, workload TEXT NOT NULL, plugin TEXT NOT NULL, device TEXT NOT NULL,
    entry TEXT NOT NULL, since_ns INTEGER NOT NULL, until_ns INTEGER);
CREATE INDEX IF NOT EXISTS held_open ON held (agent, workload) WHERE until_ns IS NULL;
"""

#: workload id prefixes and the entry point they mean, first match wins
_ENTRIES = (("k8s-claim:", "claim"), ("k8s:", "pod"), ("slurm:", "slurm"))
_NS = Decimal(10**9)


def entry_point(workload_id: str) -> str:
    """``claim``, ``pod``, ``slurm`` or ``run``: how the workload came to the node."""
    for prefix, entry in _ENTRIES:
        if workload_id.startswith(prefix):
            return entry
    return "run"


def _devices(record: LedgerRecord) -> set[tuple[str, str]]:
    return {
        (str(plugin), str(device))
        for plugin, alloc in record.allocation.items()
        for per_device in alloc.values()
        for device, amount in per_device.items()
        if amount
    }


def note_booking(db: sqlite3.Connection, record: LedgerRecord, now_ns: int) -> None:
    """Open an interval for each device ``record`` holds that has none open, and close those
    of devices it no longer holds; call inside the transaction that writes the record."""
    agent, workload = record.key
    rows = db.execute(
        "SELECT plugin, device FROM held WHERE agent = ? AND workload = ? AND until_ns IS NULL",
        (agent, workload),
    ).fetchall()
    open_now = {(str(p), str(d)) for p, d in rows}
    holds = _devices(record)
    for plugin, device in open_now - holds:
        db.execute(
            "UPDATE held SET until_ns = ? WHERE agent = ? AND workload = ? AND plugin = ? "
            "AND device = ? AND until_ns IS NULL",
            (now_ns, agent, workload, plugin, device),
        )
    entry = entry_point(workload)
    db.executemany(
        "INSERT INTO held VALUES (?, ?, ?, ?, ?, ?, NULL)",
        [(agent, workload, p, d, entry, now_ns) for p, d in sorted(holds - open_now)],
    )


def note_new_booking(db: sqlite3.Connection, record: LedgerRecord, now_ns: int) -> None:
    """:func:`note_booking` for a record just created: no interval of its key is open (the
    removal of an earlier record under it closed them), so each device opens one."""
    agent, workload = record.key
    entry = entry_point(workload)
    db.executemany(
        "INSERT INTO held VALUES (?, ?, ?, ?, ?, ?, NULL)",
        [(agent, workload, p, d, entry, now_ns) for p, d in sorted(_devices(record))],
    )


def note_release(db: sqlite3.Connection, agent: str, workload: str, now_ns: int) -> None:
    """Close every open interval of a workload whose record is being removed."""
    db.execute(
        "UPDATE held SET until_ns = ? WHERE agent = ? AND workload = ? AND until_ns IS NULL",
        (now_ns, agent, workload),
    )


@attrs.frozen(repr=False)
class HeldSeconds:
    """Seconds one workload held one device, over all its intervals; ``holding``: it still does.

    An idle device (never held) has empty ``agent``, ``workload`` and ``entry`` and 0 seconds.
    """

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    plugin: str
    device: str
    agent: str
    workload: str
    entry: str
    seconds: Decimal
    holding: bool = False

    def to_json(self) -> dict[str, str | bool]:
        return {
            "plugin": self.plugin,
            "device": self.device,
            "agent": self.agent,
            "workload": self.workload,
            "entry": self.entry,
            "seconds": format(self.seconds, "f"),
            "holding": self.holding,
        }


def held_seconds(
    db: sqlite3.Connection,
    now_ns: int,
    devices: Mapping[str, Iterable[DeviceId | str]] | None = None,
) -> list[HeldSeconds]:
    """Seconds held per device, agent, workload and entry point, open intervals counted up to
    ``now_ns``; each device of ``devices`` (per plugin) that was never held reads 0."""
    rows = db.execute(
        "SELECT plugin, device, agent, workload, entry, "
        "SUM(MAX(COALESCE(until_ns, ?), since_ns) - since_ns), MAX(until_ns IS NULL) "
        "FROM held GROUP BY plugin, device, agent, workload, entry "
        "ORDER BY plugin, device, agent, workload, entry",
        (now_ns,),
    ).fetchall()
    found = [
        HeldSeconds(p, d, a, w, e, Decimal(int(ns)) / _NS, bool(holding))
        for p, d, a, w, e, ns, holding in rows
    ]
    seen = {(h.plugin, h.device) for h in found}
    for plugin, ids in (devices or {}).items():
        for device in ids:
            if (plugin, str(device)) not in seen:
                found.append(HeldSeconds(plugin, str(device), "", "", "", Decimal(0)))
    return found


def held_now(ledger: Ledger) -> dict[tuple[str, str], dict[str, dict[str, str]]]:
    """Per workload that holds devices now (agent, workload id), the seconds it has held
    each, over all its intervals, by the ledger's clock: plugin -> device -> decimal text,
    as ``status --json`` prints them (:func:`held_seconds`, read for that alone).

    The open intervals are read by their index and summed here; the closed ones are summed
    by the database, for the workloads with an open one only (a ledger keeps every closed
    interval: most are of workloads long gone).
    """
    now = ledger.clock()
    held: dict[tuple[str, str, str, str, str], int] = {}
    for plugin, device, agent, workload, entry, since in ledger.db.execute(
        "SELECT plugin, device, agent, workload, entry, since_ns FROM held WHERE until_ns IS NULL"
    ):
        group = (plugin, device, agent, workload, entry)
        held[group] = held.get(group, 0) + max(now, since) - since
    if held:
        for plugin, device, agent, workload, entry, ns in ledger.db.execute(
            "SELECT plugin, device, agent, workload, entry, "
            "SUM(MAX(until_ns, since_ns) - since_ns) FROM held "
            "WHERE until_ns IS NOT NULL AND (agent, workload) IN "
            "(SELECT agent, workload FROM held WHERE until_ns IS NULL) "
            "GROUP BY plugin, device, agent, workload, entry"
        ):
            group = (plugin, device, agent, workload, entry)
            if group in held:
                held[group] += ns
    found: dict[tuple[str, str], dict[str, dict[str, str]]] = {}
    for group in sorted(held):  # as the device index orders them: plugin, device, holder
        plugin, device, agent, workload, _entry = group
        per_plugin = found.setdefault((agent, workload), {}).setdefault(plugin, {})
        per_plugin[device] = _seconds_text(int(held[group]))
    return found


def _seconds_text(ns: int) -> str:
    """``format(Decimal(ns) / _NS, "f")`` for ``ns >= 0``, without decimal arithmetic
    (``status --json`` writes one for every device of thousands of workloads)."""
    whole, fraction = divmod(ns, 10**9)
    return f"{whole}.{fraction:09d}".rstrip("0") if fraction else str(whole)


def read_held(
    ledger: Ledger, devices: Mapping[str, Iterable[DeviceId | str]] | None = None
) -> list[HeldSeconds]:
    """:func:`held_seconds` of a ledger, now by its clock."""
    return held_seconds(ledger.db, ledger.clock(), devices)
