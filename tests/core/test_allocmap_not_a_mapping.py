"""A request or allocation that is not a mapping is refused clearly by every kind of map.

Each map kind has its own fast path (one device, FILL scan, one slot over several devices,
several slots); every one of them hands such a value to the general path, which says what it
expected, and the map is left as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest

from accelkit.allocmap import AllocationStrategy, DiscretePropertyAllocMap, FractionAllocMap
from accelkit.allocmap.base import AbstractAllocMap
from accelkit.errors import InvalidResourceArgument
from accelkit.types import DeviceId, DeviceSlotInfo, SlotName, SlotType

D = Decimal
FILL, EVENLY = AllocationStrategy.FILL, AllocationStrategy.EVENLY


def _gpus(n: int) -> dict[DeviceId, DeviceSlotInfo]:
    return {
        DeviceId(f"cuda{i}"): DeviceSlotInfo(SlotType.COUNT, SlotName("cuda.shares"), D(1))
        for i in range(n)
    }


MAPS: dict[str, Callable[[], AbstractAllocMap]] = {
    "one device": lambda: DiscretePropertyAllocMap(
        {DeviceId("root"): DeviceSlotInfo(SlotType.BYTES, SlotName("mem"), D(2**30))},
        strategy=FILL,
    ),
    "fraction FILL (scanned)": lambda: FractionAllocMap(_gpus(4), strategy=FILL),
    "fraction EVENLY": lambda: FractionAllocMap(_gpus(4), strategy=EVENLY),
    "discrete FILL": lambda: DiscretePropertyAllocMap(_gpus(4), strategy=FILL),
    "several slots": lambda: DiscretePropertyAllocMap(
        {
            **_gpus(2),
            DeviceId("c0"): DeviceSlotInfo(SlotType.COUNT, SlotName("cpu"), D(4)),
        },
        strategy=EVENLY,
    ),
}

NOT_MAPPINGS: list[Any] = [None, [("cuda.shares", D(1))], "cuda.shares", 5, ("mem",)]


@pytest.mark.parametrize("kind", list(MAPS))
@pytest.mark.parametrize("value", NOT_MAPPINGS, ids=repr)
@pytest.mark.parametrize("op", ["allocate", "free", "apply_allocation"])
def test_a_value_that_is_no_mapping_is_refused_and_changes_nothing(
    kind: str, value: Any, op: str
) -> None:
    m = MAPS[kind]()
    held = m.allocate({next(iter(m.allocatable())): D(1)})
    before = (m.allocatable(), m.allocations)
    with pytest.raises(InvalidResourceArgument, match="expected a mapping") as caught:
        getattr(m, op)(value)
    assert type(value).__name__ in str(caught.value)
    assert (m.allocatable(), m.allocations) == before
    m.free(held)
    assert all(v == 0 for per in m.allocations.values() for v in per.values())
