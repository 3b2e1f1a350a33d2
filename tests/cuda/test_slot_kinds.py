"""The cuda plugin's slot kinds: whole GPUs and MIG instances, divisible shares."""

from __future__ import annotations

from decimal import Decimal

import pytest

from accelkit.errors import InvalidResourceArgument
from accelkit.partition import DevicePartition
from accelkit.types import AgentId, SlotName

from . import fake_nvml as fk


def test_whole_gpus_are_whole(start):
    plugin = start(fk.gpus(2))
    [spec] = plugin.configurable_slots()
    assert (spec.name, spec.divisible, spec.quantum) == ("cuda.device", False, None)


def test_shares_are_divisible_by_the_configured_quantum_and_mig_stays_whole(start):
    plugin = start(
        [fk.mig_gpu(0, ["1g.10gb"]), fk.FakeGpu(1), fk.FakeGpu(2)],
        {"allocation": "fractional", "quantum": "0.25"},
    )
    kinds = {s.name: (s.divisible, s.quantum, s.whole) for s in plugin.configurable_slots()}
    assert kinds == {
        "cuda.shares": (True, Decimal("0.25"), False),
        "cuda.mig-1g.10gb": (False, None, True),
    }
    ids = tuple(d.device_id for d in plugin.devices)
    alloc_map = plugin.create_agent_context(AgentId("a"), DevicePartition(ids)).alloc_map
    assert alloc_map.divisible_slots == {"cuda.shares": Decimal("0.25")}
    assert alloc_map.whole_slots == {"cuda.mig-1g.10gb"}
    assert alloc_map.allocate({SlotName("cuda.shares"): Decimal("0.25")})
    with pytest.raises(InvalidResourceArgument):
        alloc_map.allocate({SlotName("cuda.mig-1g.10gb"): Decimal("0.5")})
