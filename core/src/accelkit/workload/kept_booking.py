"""A workload whose end cannot be told keeps its devices (DESIGN §18, §14 Containment).

When its runtime cannot be reached to stop it or to say that it ended (the container engine
was killed while the container ran: containerd may run it on), ``accelkit run`` must not free
its devices. :func:`keep_booking` hands the record over (it loses its owner, keeps its devices
and its unfinished teardown) and returns the :class:`BookingKept` error that ``accelkit run``
reports; from then on the record's liveness is ``unknown`` while the engine is silent, and the
first full reconciliation to which the engine answers that the container is gone finishes its
teardown (``post_terminate``, removal, devices freed), as ``accelkit release --force`` does at
once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accelkit.errors import WorkloadError
from accelkit.runtime.base import WorkloadUnreachable

if TYPE_CHECKING:
    from accelkit.workload.bookkeeper import Bookkeeper
    from accelkit.workload.record import LedgerRecord

__all__ = ["BookingKept", "keep_booking"]


class BookingKept(WorkloadError):
    """The workload may still run where accelkit cannot reach it: its devices stay booked."""


def _devices(record: LedgerRecord) -> str:
    names = [
        f"{plugin}:{device}"
        for plugin, alloc in record.allocation.items()
        for per_device in alloc.values()
        for device in per_device
    ]
    return ", ".join(dict.fromkeys(names)) or "none"


def keep_booking(
    bookkeeper: Bookkeeper, record: LedgerRecord, cause: WorkloadUnreachable
) -> BookingKept:
    """Give up managing ``record`` with its devices booked; the error that says so."""
    kept = bookkeeper.hand_over(record.key)
    name = kept.workload.id
    msg = (
        f"{cause}; workload {name!r} may still run, so its devices ({_devices(kept)}) stay "
        "booked (liveness 'unknown' in 'accelkit status') until the engine answers that it is "
        f"gone, or 'accelkit release --force {name}' frees them"
    )
    return BookingKept(msg)
