"""Device order and the fill-from-front split of devices among agents."""

from __future__ import annotations

import re
from collections.abc import Sequence

from accelkit.types import AgentId, DeviceId

_DIGITS = re.compile(r"(\d+)")


def natural_sort_key(device_id: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key ordering numbers by value: ``cuda2`` before ``cuda10``, ``"2"`` before ``"10"``."""
    parts = _DIGITS.split(device_id)
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in parts if p)


def distribute_devices(
    device_ids: Sequence[DeviceId], agent_ids: Sequence[AgentId]
) -> dict[AgentId, tuple[DeviceId, ...]]:
    """Split devices among agents, fill-from-front, in natural order.

    With ``q, r = divmod(N, M)`` the first ``r`` agents get ``q + 1`` devices and the rest ``q``,
    each a contiguous run (5 GPUs over 3 agents: ``[cuda0, cuda1] [cuda2, cuda3] [cuda4]``).
    """
    ordered = sorted(device_ids, key=natural_sort_key)
    if not agent_ids:
        return {}
    quotient, remainder = divmod(len(ordered), len(agent_ids))
    result: dict[AgentId, tuple[DeviceId, ...]] = {}
    start = 0
    for index, agent_id in enumerate(agent_ids):
        size = quotient + (1 if index < remainder else 0)
        result[agent_id] = tuple(ordered[start : start + size])
        start += size
    return result
