"""Device order and the fill-from-front split of devices among agents."""

from __future__ import annotations

import re
from collections.abc import Sequence

from accelkit.types import AgentId, DeviceId

_DIGITS = re.compile(r"(\d+)")


def natural_sort_key(device_id: str) -> tuple[tuple[int, int, str], ...]:
    """Sort key ordering numbers by value: ``cuda2`` before ``cuda10``, ``"2"`` before ``"10"``.

    A run of digits compares by its length without leading zeros, then by its digits: the
    order of its value, for runs of any length (``int()`` refuses more than 4,300 digits).
    """
    key = []
    for part in _DIGITS.split(device_id):
        if not part:
            continue
        if part.isdigit():
            digits = part.lstrip("0") or "0"
            key.append((0, len(digits), digits))
        else:
            key.append((1, 0, part))
    return tuple(key)


def distribute_devices(
    device_ids: Sequence[DeviceId], agent_ids: Sequence[AgentId]
) -> dict[AgentId, tuple[DeviceId, ...]]:
    """Split devices among agents, fill-from-front, in natural order.

    With ``q, r = divmod(N, M)`` the first ``r`` agents get ``q + 1`` devices and the rest ``q``,
    each a contiguous run (5 GPUs over 3 agents: ``[cuda0, cuda1] [cuda2, cuda3] [cuda4]``).
    """
    _check_ids(device_ids, "device")
    _check_ids(agent_ids, "agent")
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


def _check_ids(ids: Sequence[str], what: str) -> None:
    """Ids are a sequence of distinct strings: a bare string would split into letters, and a
    repeated agent would lose the devices given to its first entry."""
    if isinstance(ids, str):
        msg = f"{what} ids must be a sequence of ids, not the string {ids!r}"
        raise ValueError(msg)
    seen: set[str] = set()
    for item in ids:
        if item in seen:
            msg = f"{what} id {item!r} is listed twice"
            raise ValueError(msg)
        seen.add(item)
