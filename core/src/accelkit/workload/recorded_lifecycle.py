"""The lifecycle driver of a booked workload whose every hook call the ledger records.

The intent of a hook call is written before the call, its result after it, in as few
transactions as the guarantees allow (one a phase, where the next write follows at once):

* the intent of the first plugin's ``pre_create`` can go with the booking
  (``Bookkeeper.book(started=True)``), synced; every other ``pre_create`` intent is synced on
  its own, as it is what gives the hook ``post_terminate`` whatever is lost after it;
* a hook's ``pre_create`` result goes with the next write when one follows at once: the next
  plugin's intent, or the handle when the caller records one next (``handle_next``);
* ``pre_terminate``'s result goes with the next intent of the teardown; ``post_terminate``'s
  is written at once, so that a crash after it does not call the hook a second time (unless
  the hook was not called: it kept the base class's empty one);
* a hook that keeps the base class's empty ``post_create``, ``pre_terminate`` or
  ``post_terminate`` is not called (:func:`accelkit.workload.lifecycle.implements`) and has no
  intent to record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accelkit.errors import UnknownAgent
from accelkit.events import WorkloadPhase
from accelkit.types import DeviceName, WorkloadConfig
from accelkit.workload.lifecycle import HookTarget, PhaseListener, WorkloadLifecycle
from accelkit.workload.record import LedgerRecord

if TYPE_CHECKING:
    from accelkit.workload.bookkeeper import Bookkeeper

__all__ = ["recorded_lifecycle", "result_waits"]


def result_waits(
    record: LedgerRecord, plugin: DeviceName, phase: WorkloadPhase, *, handle_next: bool
) -> bool:
    """Whether ``plugin``'s result for ``phase`` can wait for the record's next write, which
    follows at once: after ``pre_terminate`` the teardown's next intent (or the release), after
    a ``post_terminate`` that was not called (the base class's) the same, after ``pre_create``
    the next plugin's intent or the handle (``handle_next``; or the record names it already:
    the hand-over's write)."""
    if phase is WorkloadPhase.PRE_TERMINATE:
        return True
    if phase is WorkloadPhase.POST_TERMINATE:  # not called (no intent): nothing to repeat
        return phase not in record.started.get(plugin, ())
    if phase is not WorkloadPhase.PRE_CREATE:
        return False
    later = record.order[record.order.index(plugin) + 1 :] if plugin in record.order else ()
    return handle_next or record.handle is not None or bool(later)


def recorded_lifecycle(
    keeper: Bookkeeper,
    record: LedgerRecord,
    *,
    on_phase: PhaseListener | None = None,
    handle_next: bool = False,
) -> WorkloadLifecycle:
    """The driver of ``record``'s workload: see the module docstring. ``handle_next``: the
    caller records the workload's handle as soon as ``prepare`` returns (a run does), and the
    last ``pre_create`` result goes with it."""
    agent = UnknownAgent.look_up(keeper.host.agents, record.agent_id)
    targets = [HookTarget(key, agent.contexts[key], record.allocation[key]) for key in record.order]
    if handle_next:
        keeper.handle_next.add(record.key)

    def started(plugin: DeviceName, phase: WorkloadPhase) -> None:
        keeper.note_start(record.key, plugin, phase)

    def recorded(plugin: DeviceName, phase: WorkloadPhase) -> None:
        keeper.note_phase(record.key, plugin, phase)
        if on_phase is not None:
            on_phase(plugin, phase)

    def configured(plugin: DeviceName, config: WorkloadConfig) -> None:
        # kept with the next write of the record (post_create's), not a write of its own
        if config.resource_data and record.key in keeper.owned:
            owned = keeper.owned[record.key]
            keeper.owned[record.key] = owned.with_data(plugin, config.resource_data)

    return WorkloadLifecycle(
        record.agent_id,
        record.workload,
        targets,
        release=lambda: keeper.release(record.key),
        on_phase=recorded,
        on_start=started,
        notify=keeper.notify,
        hook_timeout=keeper.hook_timeout,
        on_config=configured,
    )
