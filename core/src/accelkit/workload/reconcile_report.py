"""What a reconciliation of the ledger found and did: kept records, finished teardowns,
double bookings, records set aside, and one line per finding for logs and the command line."""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING

import attrs

from accelkit.reprs import attrs_eq, attrs_hash, attrs_repr
from accelkit.types import AgentId, DeviceId, DeviceName, SlotName
from accelkit.workload.ledger import SetAside

if TYPE_CHECKING:  # the orphan sweep is imported where it runs (a docker run, status, serve)
    from accelkit.workload.orphans import OrphanContainer

__all__ = ["DoubleBooking", "ReconcileReport", "RecordKey", "TornDown", "merged"]

#: a record's key: its agent and its workload id
RecordKey = tuple[AgentId, str]


@attrs.frozen(repr=False)
class DoubleBooking:
    """A device claimed beyond its capacity by the records listed in ``claims``."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    agent_id: AgentId
    plugin: DeviceName
    slot: SlotName
    device_id: DeviceId
    capacity: Decimal
    claims: tuple[tuple[str, Decimal], ...]  # (workload id, amount)
    detail: str = ""


@attrs.frozen(repr=False)
class TornDown:
    """A dead workload whose teardown was finished (or, ``unfinished``, left to retry)."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    agent_id: AgentId
    workload_id: str
    post_terminated: tuple[DeviceName, ...]
    errors: tuple[str, ...] = ()
    unfinished: tuple[DeviceName, ...] = ()
    freed: bool = True


@attrs.frozen(repr=False)
class ReconcileReport:
    """What reconciling found and did."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    kept: tuple[RecordKey, ...] = ()
    torn_down: tuple[TornDown, ...] = ()
    double_booked: tuple[DoubleBooking, ...] = ()
    set_aside: tuple[SetAside, ...] = ()
    problems: tuple[str, ...] = ()
    #: containers of this ledger that no record named, removed (:mod:`accelkit.workload.orphans`)
    orphans: tuple[OrphanContainer, ...] = ()

    @property
    def clean(self) -> bool:
        """Nothing for an operator to look at."""
        return not (self.double_booked or self.set_aside or self.problems or self.orphans)

    def messages(self) -> list[str]:
        """One line per finding, for logs and the command line."""
        lines = [
            (
                f"ledger: finished the teardown of dead workload {t.workload_id!r}"
                if t.freed
                else f"ledger: the teardown of dead workload {t.workload_id!r} is unfinished "
                f"({', '.join(t.unfinished) or 'hooks missing'}); its devices stay booked and "
                "it is tried again later ('accelkit release --force' frees it)"
            )
            + (f" ({'; '.join(t.errors)})" if t.errors else "")
            for t in self.torn_down
        ]
        lines += [
            f"ledger: device {d.device_id!r} ({d.slot}) of agent {d.agent_id!r} is booked "
            f"beyond its capacity {d.capacity}: " + ", ".join(f"{w} holds {a}" for w, a in d.claims)
            for d in self.double_booked
        ]
        lines += [
            f"ledger: set aside unreadable record {s.name} ({s.reason})"
            + (f" -> table {s.moved_to}" if s.moved_to else " (could not move it)")
            for s in self.set_aside
        ]
        lines += [f"ledger: {p}" for p in self.problems]
        lines += [o.message() for o in self.orphans]
        return lines


def merged(full: ReconcileReport, later: ReconcileReport) -> ReconcileReport:
    """A full reconciliation's report followed by an incremental sync's."""
    return ReconcileReport(
        full.kept,
        full.torn_down,
        (*full.double_booked, *later.double_booked),
        (*full.set_aside, *later.set_aside),
        (*full.problems, *later.problems),
    )
