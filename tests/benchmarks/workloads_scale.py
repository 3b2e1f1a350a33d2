"""Scale rows: the cost of an allocate as the device count grows from 8 to 4,096.

``S.<kind>.<strategy>.n<N>``: a map of ``N`` GPUs (1 each; fraction maps 1.0 with a quantum of
0.01), half on each NUMA node, every device partly used before the timed loop (a seeded mix,
so the free amounts are many and splits have to choose), then a seeded, outcome-dependent
allocate/free trace of :data:`OPS` operations as in W2 (discrete, 1-8 GPUs) and W3 (fraction,
0.1-3.3 shares, most above one device's room for the multi-device rows): refusals, splits and
frees all count. The rows of one kind and strategy are one group, timed in alternation.

After the table, ``run.py`` prints each group's **growth exponent**: the slope of
``log(µs/op)`` against ``log(N)`` fitted over its rows of the same run (0: flat, 1: linear).
A ratio of figures of one run, so it means something on a loaded machine where absolute
figures do not.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

import harness
from harness import Row, Trial, add

from accelkit.allocmap import (
    AbstractAllocMap,
    AllocationStrategy,
    DiscretePropertyAllocMap,
    FractionAllocMap,
)
from accelkit.errors import ResourceError
from accelkit.types import DeviceId, DeviceSlotInfo, SlotName, SlotType

SIZES = (8, 64, 512, 4096)
OPS = 2_000
SEED = 505
MAX_LIVE = 16
QUANTUM = Decimal("0.01")
#: the exponent fraction EVENLY is asked to stay under
FLAT = 0.1

_SHARES = tuple(Decimal(s) for s in ("0.1", "0.25", "0.5", "1", "1.5", "2", "2.5", "3.3"))
_USED = tuple(Decimal(s) for s in ("0", "0", "0.1", "0.25", "0.5", "0.75", "0.9"))


def _map(kind: str, strategy: AllocationStrategy, n: int) -> tuple[AbstractAllocMap, SlotName]:
    """A map of ``n`` GPUs, every device partly used (untimed)."""
    slot = SlotName("cuda.device" if kind == "discrete" else "cuda.shares")
    cap = Decimal(1) if kind == "discrete" else Decimal("1.0")
    devices = {
        DeviceId(f"cuda{i}"): DeviceSlotInfo(SlotType.COUNT, slot, cap, i * 2 // n)
        for i in range(n)
    }
    m: AbstractAllocMap
    if kind == "discrete":
        m = DiscretePropertyAllocMap(devices, strategy=strategy)
    else:
        m = FractionAllocMap(devices, strategy=strategy, quantum_size=QUANTUM)
    rng = random.Random(SEED - 1)
    for d in devices:
        used = Decimal(rng.random() < 0.5) if kind == "discrete" else rng.choice(_USED)
        if used:
            m.apply_allocation({slot: {d: used}})
    return m, slot


def _draw(kind: str) -> Callable[[random.Random], Decimal]:
    if kind == "discrete":
        return lambda rng: Decimal(rng.randint(1, 8))
    return lambda rng: rng.choice(_SHARES)


def _bench(kind: str, strategy: AllocationStrategy, n: int) -> Callable[[], Trial]:
    draw = _draw(kind)

    def run() -> Trial:
        m, slot = _map(kind, strategy, n)
        req_rng, free_rng = random.Random(SEED), random.Random(SEED + 1)
        live: list[Any] = []
        must_free = False
        ok = failed = 0
        allocate, free = m.allocate, m.free
        clock = harness.loop_clock
        start = clock()
        for _ in range(OPS):
            if live and (must_free or len(live) >= MAX_LIVE):
                free(live.pop(free_rng.randrange(len(live))))
                must_free = False
            else:
                try:
                    live.append(allocate({slot: draw(req_rng)}))
                    ok += 1
                except ResourceError:
                    failed += 1
                    must_free = True
        seconds = clock() - start
        return Trial(ops=OPS, seconds=seconds, ok=ok, failed=failed)

    return run


def exponent(sizes: Sequence[int], us_per_op: Sequence[float]) -> float:
    """The least-squares slope of ``log(us_per_op)`` against ``log(sizes)``."""
    xs = [math.log(n) for n in sizes]
    ys = [math.log(u) for u in us_per_op]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den


def summarize(rows: Sequence[Row]) -> list[str]:
    """One line per scale group measured: µs/op per device count and the fitted exponent."""
    groups: dict[str, list[tuple[int, float]]] = {}
    for r in rows:
        if r.name.startswith("S.") and ".n" in r.name:
            group, _, size = r.name.rpartition(".n")
            groups.setdefault(group, []).append((int(size), r.us_per_op))
    lines = []
    for group, points in groups.items():
        if len(points) < 2:
            continue
        points.sort()
        slope = exponent([n for n, _ in points], [u for _, u in points])
        figures = ", ".join(f"{u:,.1f} µs at {n:,}" for n, u in points)
        goal = f" (goal < {FLAT:g})" if group == "S.fraction.EVENLY" else ""
        lines.append(f"- {group}: growth exponent {slope:.3f}{goal}; {figures}")
    return lines


for _kind in ("discrete", "fraction"):
    for _s in (AllocationStrategy.EVENLY, AllocationStrategy.FILL):
        for _n in SIZES:
            add(f"S.{_kind}.{_s.name}.n{_n}", _bench(_kind, _s, _n), group=f"S.{_kind}.{_s.name}")
