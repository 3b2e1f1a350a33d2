"""A refused booking, with who holds the devices it could not get (from the ledger's index).

The ledger indexes every record's devices by plugin and device id, node-wide, so a refusal can
name the holders of the agent's devices without reading every record, also the holders booked
under another partition (another config, or agents since added or removed), whose devices this
agent has now but cannot be granted until they are released.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accelkit.errors import InsufficientResource
from accelkit.workload.ledger import Ledger

if TYPE_CHECKING:
    from accelkit.host import AgentView

__all__ = ["MAX_HOLDERS_NAMED", "naming_holders"]

#: how many holders a refusal names at most
MAX_HOLDERS_NAMED = 8


def naming_holders(
    ledger: Ledger, agent: AgentView, exc: InsufficientResource
) -> InsufficientResource:
    """``exc`` with who holds the agent's devices of that slot; ``exc`` when nobody does."""
    plugin = agent.plugin_of(exc.slot)
    ctx = agent.contexts.get(plugin)
    if ctx is None:
        return exc
    holdings = ledger.holders(plugin, sorted(ctx.device_mask))
    if not holdings:
        return exc
    by_workload: dict[tuple[str, str], list[str]] = {}
    for h in holdings:
        by_workload.setdefault((h.agent_id, h.workload_id), []).append(f"{h.device_id}={h.amount}")
    named = [
        f"{workload!r} of agent {agent_id!r} ({', '.join(devices)})"
        + (
            ""
            if agent_id == agent.agent_id
            else f", booked under another partition: these {plugin} devices are agent "
            f"{agent.agent_id!r}'s now and stay held until that workload ends"
        )
        for (agent_id, workload), devices in list(by_workload.items())[:MAX_HOLDERS_NAMED]
    ]
    more = len(by_workload) - len(named)
    text = f"{exc}; held by " + "; ".join(named) + (f"; and {more} more" if more > 0 else "")
    text += " (see 'accelkit status')"
    return InsufficientResource(
        text,
        slot=exc.slot,
        requested=exc.requested,
        allocatable=exc.allocatable,
        context_tag=exc.context_tag,
    )
