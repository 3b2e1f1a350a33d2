"""Bookings a bridge answered for, handed over together after the answer.

A bridge books a pod's devices (or a claim's) under its own process, runs ``pre_create`` and
answers the kubelet; the record is then handed over (``Bookkeeper.hand_over``: no owner, its
liveness told by its handle), because the pod outlives the bridge. That write is not needed
for the answer, so :class:`HandOvers` makes it afterwards, for every booking answered
meanwhile in one transaction, ``delay`` seconds after the first of them, or at once where the
bridge is about to read or change those records itself (its tick, an unprepare, a booking
that hands devices over). Until then the ledger names the bridge as the owner: every other
accelkit process leaves the record alone while the bridge runs, and judges it through its
handle once the bridge is gone, killed included, so nothing is lost by the wait.
"""

from __future__ import annotations

import asyncio
import logging
from decimal import Decimal

from accelkit.errors import AccelkitError
from accelkit.workload.bookkeeper import Bookkeeper
from accelkit.workload.reconcile_report import RecordKey

__all__ = ["DEFAULT_DELAY", "HandOvers"]

log = logging.getLogger(__name__)

#: seconds between the first booking answered and the write that hands it over
DEFAULT_DELAY = Decimal("0.05")


class HandOvers:
    """The bookings of one bridge process waiting to be handed over; see the module docstring."""

    def __init__(self, bookkeeper: Bookkeeper, delay: Decimal = DEFAULT_DELAY) -> None:
        self.bookkeeper = bookkeeper
        self.delay = delay
        self.pending: list[RecordKey] = []
        self._timer: asyncio.TimerHandle | None = None

    def add(self, key: RecordKey) -> None:
        """Hand ``key`` over with the next write (within ``delay`` seconds)."""
        self.pending.append(key)
        if self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(float(self.delay), self.write)

    def write(self) -> None:
        """Hand over every pending booking now, in one transaction (not synced, as each
        hand-over alone is not); a failure is logged, and those records stay the bridge's
        until it ends."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self.pending:
            return
        keys = list(self.pending)
        self.pending.clear()
        owned = self.bookkeeper.owned
        try:
            with self.bookkeeper.ledger.transaction(durable=False):
                for key in keys:
                    if key in owned:  # released meanwhile (a request refused after all)
                        self.bookkeeper.hand_over(key)
        except AccelkitError as exc:
            names = ", ".join(workload for _agent, workload in keys)
            log.warning("cannot hand over %s (kept by this process until it ends): %s", names, exc)
