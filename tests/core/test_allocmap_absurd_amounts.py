"""Absurd amounts (``1E+999999``) get errors of a line, naming the amount as it was given."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest

from accelkit.allocmap import AllocationStrategy, DiscretePropertyAllocMap, FractionAllocMap
from accelkit.allocmap.base import AbstractAllocMap
from accelkit.errors import InsufficientResource, InvalidResourceArgument, ResourceError
from accelkit.types import DeviceId, DeviceSlotInfo, SlotName, SlotType

D = Decimal
HUGE = D("1E+999999")
SHARES, MEM = SlotName("cuda.shares"), SlotName("mem")


def _gpus(strategy: AllocationStrategy) -> AbstractAllocMap:
    devices = {DeviceId(f"cuda{i}"): DeviceSlotInfo(SlotType.COUNT, SHARES, D(1)) for i in range(4)}
    return FractionAllocMap(devices, strategy=strategy)


def _mem() -> AbstractAllocMap:
    devices = {DeviceId("root"): DeviceSlotInfo(SlotType.BYTES, MEM, D(2**30))}
    return DiscretePropertyAllocMap(devices, strategy=AllocationStrategy.FILL)


MAPS: dict[str, tuple[Callable[[], AbstractAllocMap], SlotName, DeviceId]] = {
    "fraction FILL": (lambda: _gpus(AllocationStrategy.FILL), SHARES, DeviceId("cuda0")),
    "fraction EVENLY": (lambda: _gpus(AllocationStrategy.EVENLY), SHARES, DeviceId("cuda0")),
    "one device": (_mem, MEM, DeviceId("root")),
}


@pytest.mark.parametrize("kind", list(MAPS))
@pytest.mark.parametrize("given", [HUGE, "1E+999999"], ids=["Decimal", "str"])
def test_an_absurd_request_is_refused_in_one_short_line(kind: str, given: Any) -> None:
    make, slot, _ = MAPS[kind]
    m = make()
    with pytest.raises(InsufficientResource) as caught:
        m.allocate({slot: given})
    text = str(caught.value)
    assert "requested 1E+999999, only " in text
    assert len(text) < 120
    assert caught.value.requested == HUGE  # the field keeps the exact amount


@pytest.mark.parametrize("kind", list(MAPS))
@pytest.mark.parametrize("op", ["free", "apply_allocation"])
def test_freeing_or_applying_an_absurd_amount_names_it_as_given(kind: str, op: str) -> None:
    make, slot, dev = MAPS[kind]
    m = make()
    held = m.allocate({slot: D(1)})
    before = m.allocations
    verb = "free" if op == "free" else "apply"
    # was: the amount one unit past capacity the map holds an absurd amount as ("8.01")
    with pytest.raises(InvalidResourceArgument, match=rf"^cannot {verb} 1E\+999999 of "):
        getattr(m, op)({slot: {dev: HUGE}})
    assert m.allocations == before
    m.free(held)


def test_an_amount_off_the_quantum_is_named_in_plain_form_when_short() -> None:
    m = _gpus(AllocationStrategy.FILL)
    with pytest.raises(ResourceError, match=r"0\.001 is not a multiple of the quantum 0\.01"):
        m.allocate({SHARES: D("1E-3")})
    with pytest.raises(ResourceError, match=r"1E-999999 is not a multiple of the quantum 0\.01"):
        m.allocate({SHARES: D("1E-999999")})
