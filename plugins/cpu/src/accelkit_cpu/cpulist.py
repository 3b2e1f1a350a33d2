"""The kernel's CPU list format (``0-3,8,10-11``), used by cpusets and sysfs."""

from __future__ import annotations

import re
from collections.abc import Iterable

_RANGE = re.compile(r"(\d+)(?:-(\d+))?")


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """The sorted, distinct CPU numbers of a list such as ``"0-3,8,10-11"``.

    Surrounding whitespace is ignored and an empty list gives ``()`` (an empty cpuset).

    Raises:
        ValueError: an item is not a number or an ascending ``a-b`` range.
    """
    stripped = text.strip()
    if not stripped:
        return ()
    cpus: set[int] = set()
    for item in stripped.split(","):
        match = _RANGE.fullmatch(item.strip())
        if match is None:
            msg = f"malformed CPU list {text.strip()!r}: {item!r} is not 'N' or 'N-M'"
            raise ValueError(msg)
        first = int(match[1])
        last = int(match[2]) if match[2] is not None else first
        if last < first:
            msg = f"malformed CPU list {text.strip()!r}: range {item!r} runs backwards"
            raise ValueError(msg)
        cpus.update(range(first, last + 1))
    return tuple(sorted(cpus))


def format_cpu_list(cpus: Iterable[int]) -> str:
    """The shortest list text for ``cpus``: ``(0, 1, 2, 3, 8)`` gives ``"0-3,8"``."""
    items: list[str] = []
    ordered = sorted(set(cpus))
    start = 0
    for index in range(1, len(ordered) + 1):
        if index == len(ordered) or ordered[index] != ordered[index - 1] + 1:
            first, last = ordered[start], ordered[index - 1]
            items.append(str(first) if first == last else f"{first}-{last}")
            start = index
    return ",".join(items)
