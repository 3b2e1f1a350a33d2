"""An operator's release of a workload by id (``accelkit release``): stop it, finish its
teardown and free it, whichever process booked it (``Node.release`` documents it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs

from accelkit.errors import InvalidResourceArgument, WorkloadError
from accelkit.types import AgentId
from accelkit.workload import stopping
from accelkit.workload.liveness import Liveness
from accelkit.workload.record import LedgerRecord
from accelkit.workload.status import ReleaseReport

if TYPE_CHECKING:
    from accelkit.workload.bookkeeper import Bookkeeper


async def release_workload(
    keeper: Bookkeeper,
    workload_id: str,
    *,
    agent: AgentId | None = None,
    force: bool = False,
    grace: float = 5.0,
    on_skip: Callable[[str], None] | None = None,
) -> ReleaseReport:
    """Stop a workload, finish its teardown and free it (``Node.release`` documents it)."""
    record = _find(keeper, workload_id, agent)
    skipped: list[str] = []

    def skip(what: str) -> None:  # said before it is skipped
        if on_skip is not None:
            on_skip(what)
        skipped.append(what)

    if record.key in keeper.owned:
        msg = f"workload {workload_id!r} is run by this process; end it through its lifecycle"
        raise InvalidResourceArgument(msg)
    state = await keeper.reconciler.liveness(record)
    stopped = False
    if state is Liveness.MANAGED and record.owner is not None:
        if await stopping.stop_owner(record, keeper.ledger, grace, force=force):
            return ReleaseReport(record.agent_id, record.workload.id, stopped=True)
        if not force:
            waited = grace + stopping.OWNER_TEARDOWN_WAIT_S
            msg = (
                f"the accelkit process {record.owner.pid} that runs workload "
                f"{workload_id!r} did not end it within {waited:g} s; "
                "'--force' kills that process and finishes the teardown here"
            )
            raise WorkloadError(msg)
        skip(f"the teardown by accelkit process {record.owner.pid}, which was killed")
        stopped = True
    elif state is Liveness.RUNNING:
        stop = keeper._stopper(record, grace)
        if stop is not None:
            await stop()
        elif record.leader is not None:
            await stopping.end_process(record.leader.pid, grace)
        stopped = True
    elif state is Liveness.UNKNOWN:
        what = (
            f"runtime {record.handle.runtime!r} cannot tell whether it runs"
            if record.handle is not None
            else "nothing tells whether it runs"
        )
        if not force:
            msg = (
                f"cannot reach workload {workload_id!r} ({what}); '--force' frees its "
                "devices without stopping it"
            )
            raise WorkloadError(msg)
        skip(f"stopping the workload ({what})")
    report = await _finish_release(keeper, record, skip, stopped=stopped, force=force)
    return attrs.evolve(report, skipped=tuple(skipped))


async def _finish_release(
    keeper: Bookkeeper,
    record: LedgerRecord,
    skip: Callable[[str], None],
    *,
    stopped: bool,
    force: bool,
) -> ReleaseReport:
    problems: list[str] = []
    async with keeper._syncing:
        with keeper.ledger.transaction():
            current = keeper.ledger.read(*record.key)
            if current is None:  # finished meanwhile (by its owner, say)
                return ReleaseReport(record.agent_id, record.workload.id, stopped=stopped)
            keeper.last_report = keeper._catch_up()
            claimed = keeper._claim(current)
    torn = await keeper._finish(claimed, problems, force=force)
    if torn is None:
        raise WorkloadError("; ".join(problems) or "cannot finish the teardown")
    if force:
        for plugin in torn.unfinished:
            skip(f"post_terminate of plugin {plugin!r} (timed out)")
        with keeper.ledger.transaction():  # hooks of plugins the agent lacks: free it anyway
            if keeper.ledger.remove(*record.key):
                keeper.reconciler.forget(record.key, problems)
    elif not torn.freed:
        msg = (
            f"workload {record.workload.id!r}: the teardown is unfinished "
            f"({', '.join(torn.unfinished)} timed out); its devices stay booked, "
            "'--force' frees them"
        )
        raise WorkloadError(msg)
    return ReleaseReport(
        record.agent_id,
        record.workload.id,
        stopped=stopped,
        post_terminated=torn.post_terminated,
        errors=(*torn.errors, *problems),
    )


def _find(keeper: Bookkeeper, workload_id: str, agent: AgentId | None) -> LedgerRecord:
    matches = [
        r
        for (a, w), r in keeper.ledger.scan().records.items()
        if w == workload_id and (agent is None or a == agent)
    ]
    if not matches:
        where = f" of agent {agent!r}" if agent is not None else ""
        msg = f"no workload {workload_id!r}{where} in the ledger (see 'accelkit status')"
        raise InvalidResourceArgument(msg)
    if len(matches) > 1:
        agents = ", ".join(sorted(r.agent_id for r in matches))
        msg = f"several agents have a workload {workload_id!r} ({agents}); pass --agent"
        raise InvalidResourceArgument(msg)
    return matches[0]
