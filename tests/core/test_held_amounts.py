"""What ``status`` shows a workload holding of each device: the sum over the slots, exact."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from accelkit.types import DeviceId, SlotName
from accelkit.workload.status import held_amounts

amounts = st.decimals(min_value=0, max_value=10**6, places=3, allow_nan=False) | st.sampled_from(
    [Decimal("1E+3"), Decimal("0.50"), Decimal("1.0"), Decimal(0)]
)
allocs = st.dictionaries(
    st.sampled_from([SlotName("cpu"), SlotName("mem"), SlotName("cuda.shares")]),
    st.dictionaries(st.sampled_from([DeviceId(d) for d in "0123"]), amounts, max_size=4),
    max_size=3,
)


def _summed(alloc: dict[SlotName, dict[DeviceId, Decimal]]) -> dict[DeviceId, Decimal]:
    held: dict[DeviceId, Decimal] = {}
    for per_device in alloc.values():
        for device, amount in per_device.items():
            if amount:
                held[device] = held.get(device, Decimal(0)) + amount
    return dict(sorted(held.items()))


@given(allocs)
def test_held_is_the_sum_over_the_slots_as_written(alloc):
    held = held_amounts(alloc)
    expected = _summed(alloc)
    assert list(held) == list(expected)  # sorted by id, zeros left out
    assert [str(a) for a in held.values()] == [str(a) for a in expected.values()]  # as printed
