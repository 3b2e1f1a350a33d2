"""Fraction EVENLY's split reads only the top of the free order, however many devices follow."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import assume, given
from hypothesis import strategies as st

from accelkit.allocmap import AllocationStrategy, FractionAllocMap
from accelkit.allocmap.placement import EQUAL_REACH
from accelkit.types import DeviceId, DeviceSlotInfo, SlotName, SlotType

S = SlotName("cuda.shares")
Q = Decimal("0.01")


def evenly_map(frees: list[int]) -> FractionAllocMap:
    """GPUs of 1.0 share each, with ``frees[i]`` quanta free on ``cuda<i>``."""
    m = FractionAllocMap(
        {
            DeviceId(f"cuda{i}"): DeviceSlotInfo(SlotType.COUNT, S, Decimal("1.0"), i % 2)
            for i in range(len(frees))
        },
        strategy=AllocationStrategy.EVENLY,
        quantum_size=Q,
    )
    for i, free in enumerate(frees):
        if free < 100:
            m.apply_allocation({S: {DeviceId(f"cuda{i}"): (100 - free) * Q}})
    return m


@given(
    frees=st.lists(st.integers(0, 100), min_size=2, max_size=12),
    request=st.integers(101, 600),
    extra=st.lists(st.integers(0, 10**6), min_size=1, max_size=60),
)
def test_a_split_does_not_depend_on_devices_far_below_the_top_of_the_free_order(
    frees: list[int], request: int, extra: list[int]
) -> None:
    assume(sum(frees) >= request)
    answer = evenly_map(frees).allocate({S: request * Q})[S]
    shares = [int(a / Q) for a in answer.values()]
    assume(len(shares) > 1 and max(shares) - min(shares) <= 1)  # an even or nearly even split
    # The walk looks at EQUAL_REACH devices past the split's at most, whose shares would be
    # at least this: devices with less free than that sit far below the top of the order.
    below = request // (len(shares) + EQUAL_REACH)
    assume(below > 0)
    more = frees + [x % below for x in extra]
    assert evenly_map(more).allocate({S: request * Q})[S] == answer


def test_a_split_over_4096_devices_takes_the_least_free_that_hold_their_shares() -> None:
    # 4,090 devices too small for a share of 1.5 over two, then six roomier ones
    frees = [30] * 4090 + [100, 100, 90, 80, 80, 70]
    granted = evenly_map(frees).allocate({S: Decimal("1.5")})[S]
    assert granted == {DeviceId("cuda4093"): Decimal("0.75"), DeviceId("cuda4094"): Decimal("0.75")}
