"""Is a workload still alive? What the ledger alone can tell.

:class:`Liveness` is the answer reconciliation gives for each record (see
:mod:`accelkit.workload.reconcile`); :func:`liveness_of` is what the owner and leader stamps
(:class:`~accelkit.runtime.process_stamp.ProcessStamp`) say without asking any runtime.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from accelkit.runtime.process_stamp import ProcessStamp
    from accelkit.workload.record import LedgerRecord

#: whether a stamped process runs (:meth:`ProcessStamp.is_running`, or a memo of it)
Running = Callable[["ProcessStamp"], bool]


class Liveness(enum.Enum):
    """What the ledger can tell of a record's workload."""

    MANAGED = "managed"  # its owner process runs
    RUNNING = "running"  # its runtime, or its leader process, says it runs
    GONE = "gone"
    UNKNOWN = "unknown"  # nothing here can tell: the devices stay booked


def liveness_of(record: LedgerRecord) -> Liveness:
    """The liveness of a record by its owner and leader stamps (no runtime asked)."""
    if record.owner is not None and record.owner.is_running():
        return Liveness.MANAGED
    return by_leader(record)


def by_leader(record: LedgerRecord, running: Running | None = None) -> Liveness:
    """The liveness of a record by its leader process: for a record no runtime answers for.

    Only a process-tree record that never got a leader is gone without one (it never ran);
    any other record without a leader is ``UNKNOWN``. ``running`` replaces the stamp's own
    check (a memo of it: see :class:`RunningMemo`).
    """
    if record.leader is not None:
        alive = record.leader.is_running() if running is None else running(record.leader)
        return Liveness.RUNNING if alive else Liveness.GONE
    if record.workload.type.value == "process_tree":
        return Liveness.GONE  # never got a leader, and nobody manages it any more
    return Liveness.UNKNOWN


class RunningMemo:
    """Each process stamp's check made once: one judgement of a ledger asks whether a process
    runs once, however many records name it (a daemon owns every workload it booked)."""

    def __init__(self) -> None:
        self._seen: dict[ProcessStamp, bool] = {}
        #: by the stamp object (kept, so its id stays its own): records read from the ledger
        #: share one object per stamp, found without hashing its fields
        self._by_id: dict[int, tuple[ProcessStamp, bool]] = {}

    def __call__(self, stamp: ProcessStamp) -> bool:
        """Whether the stamped process runs, as its first check in this memo said."""
        known = self._by_id.get(id(stamp))
        if known is not None:
            return known[1]
        alive = self._seen.get(stamp)
        if alive is None:
            alive = self._seen[stamp] = stamp.is_running()
        self._by_id[id(stamp)] = (stamp, alive)
        return alive
