"""The operator's list of workloads (``accelkit status``): every record of the ledger with its
liveness, judged once and read incrementally after (``Node.status`` documents it)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from accelkit.workload.liveness import Liveness
from accelkit.workload.record import LedgerRecord
from accelkit.workload.status_row import status_row

if TYPE_CHECKING:
    from accelkit.workload.bookkeeper import Bookkeeper
    from accelkit.workload.status import WorkloadStatus

__all__ = ["status_rows", "statuses"]

#: each liveness's text (an enum's ``value`` is a Python-level look-up, per workload)
_TEXT = {state: state.value for state in Liveness}


async def statuses(keeper: Bookkeeper, *, reconcile: bool = True) -> list[WorkloadStatus]:
    """Every workload of the ledger, after a full reconciliation (:func:`records_judged`)."""
    from accelkit.workload.status import status_of

    now = time.time()
    return [
        status_of(record, _TEXT[state], now, owner_alive=alive)
        for record, state, alive in await records_judged(keeper, reconcile=reconcile)
    ]


async def status_rows(keeper: Bookkeeper, *, reconcile: bool = True) -> list[dict[str, Any]]:
    """:func:`statuses` as ``status --json`` prints them (``WorkloadStatus.to_json``), made
    from the records directly: thousands of workloads need no status objects in between."""
    now = time.time()
    return [
        status_row(record, _TEXT[state], now, owner_alive=alive)
        for record, state, alive in await records_judged(keeper, reconcile=reconcile)
    ]


async def records_judged(
    keeper: Bookkeeper, *, reconcile: bool = True
) -> list[tuple[LedgerRecord, Liveness, bool]]:
    """Every record of the ledger, by key, with its liveness and whether its owner runs.

    ``reconcile=False`` takes the last full reconciliation's (the node's opening one) as it is:
    its records and their liveness, with what the ledger changed since (the dead workloads it
    finished) read incrementally. Each record is read once and its liveness asked once: only a
    record written since it was judged is asked again.
    """
    if reconcile or keeper.judged is None:
        await keeper.reconcile()
    assert keeper.judged is not None
    judged, states = keeper.judged
    changes = keeper.ledger.changes(judged.seq)
    if not changes.complete:  # removals that far back were pruned: judge everything
        await keeper.reconcile()
        judged, states = keeper.judged
        changes = keeper.ledger.changes(judged.seq)
    records = {k: r for k, r in judged.records.items() if k not in changes.removed}
    records.update(changes.records)
    found: list[tuple[LedgerRecord, Liveness, bool]] = []
    for key, record in sorted(records.items()):
        if key in keeper.owned:
            state = Liveness.MANAGED
        elif key in states and judged.records.get(key) is record:
            state = states[key]
        else:
            try:
                state = await keeper.reconciler.liveness(record)
            except Exception:
                state = Liveness.UNKNOWN
        found.append((record, state, _owner_alive(keeper, record, state)))
    return found


def _owner_alive(keeper: Bookkeeper, record: LedgerRecord, state: Liveness) -> bool:
    """Whether the record's owner runs: a record is ``managed`` exactly when it does (its
    liveness is asked of its owner first), unless a test decides liveness."""
    if keeper.reconciler.liveness_override is None:
        return state is Liveness.MANAGED
    return record.owner is not None and record.owner.is_running()
