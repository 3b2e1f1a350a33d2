"""The kernel's cpu-list notation (``0-3,8``), as cpusets and Docker's ``CpusetCpus`` use it."""

from __future__ import annotations

from collections.abc import Iterable


def format_cpu_list(ids: Iterable[int]) -> str:
    """``[0, 1, 2, 3, 8]`` → ``"0-3,8"``; duplicates and order do not matter."""
    ordered = sorted(set(ids))
    ranges: list[str] = []
    start = previous = None
    for number in ordered:
        if previous is not None and number == previous + 1:
            previous = number
            continue
        if start is not None:
            ranges.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = number
    if start is not None:
        ranges.append(str(start) if start == previous else f"{start}-{previous}")
    return ",".join(ranges)
