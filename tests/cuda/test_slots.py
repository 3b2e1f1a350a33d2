"""Slots in discrete and fractional mode, and the alloc maps built over them."""

from __future__ import annotations

from decimal import Decimal

import pytest

from accelkit.allocmap import DiscretePropertyAllocMap, FractionAllocMap
from accelkit.errors import InvalidResourceCombination, NotMultipleOfQuantum
from accelkit.types import DeviceId, SlotName, SlotType

from . import fake_nvml as fk


def test_discrete_mode_offers_one_cuda_device_per_gpu(start):
    plugin = start(fk.gpus(2, numa_node=1))
    slots = plugin.device_slots(plugin.devices)
    assert {d: (s.slot_name, s.slot_type, s.amount, s.numa_node) for d, s in slots.items()} == {
        "cuda0": ("cuda.device", SlotType.COUNT, Decimal(1), 1),
        "cuda1": ("cuda.device", SlotType.COUNT, Decimal(1), 1),
    }
    assert [s.name for s in plugin.configurable_slots()] == ["cuda.device"]


def test_fractional_mode_offers_the_configured_shares(start):
    plugin = start(fk.gpus(2), {"allocation": "fractional", "shares-per-device": "2.5"})
    slots = plugin.device_slots(plugin.devices)
    assert {s.slot_name for s in slots.values()} == {"cuda.shares"}
    assert {s.amount for s in slots.values()} == {Decimal("2.5")}
    assert [s.name for s in plugin.configurable_slots()] == ["cuda.shares"]


def test_fractional_mode_keeps_mig_instances_unique(start):
    plugin = start([fk.mig_gpu(0, ["1g.10gb"]), fk.FakeGpu(1)], {"allocation": "fractional"})
    slots = plugin.device_slots(plugin.devices)
    assert slots["cuda0-mig7"].slot_name == "cuda.mig-1g.10gb"
    assert slots["cuda1"].slot_name == "cuda.shares"


def test_discrete_alloc_map(start):
    plugin = start(fk.gpus(2))
    amap = plugin.create_alloc_map(
        plugin.device_slots(plugin.devices), frozenset({DeviceId("cuda0"), DeviceId("cuda1")})
    )
    assert isinstance(amap, DiscretePropertyAllocMap)
    alloc = amap.allocate({SlotName("cuda.device"): Decimal(2)})
    assert alloc == {"cuda.device": {"cuda0": Decimal(1), "cuda1": Decimal(1)}}


def test_fractional_alloc_map_uses_the_configured_quantum(start):
    config = {"allocation": "fractional", "quantum": "0.25", "allow-fragmentation": False}
    plugin = start(fk.gpus(2), config)
    mask = frozenset({DeviceId("cuda0"), DeviceId("cuda1")})
    amap = plugin.create_alloc_map(plugin.device_slots(plugin.devices), mask)
    assert isinstance(amap, FractionAllocMap)
    assert amap.quantum_size == Decimal("0.25")
    assert amap.allow_fragmentation is False
    with pytest.raises(NotMultipleOfQuantum):
        amap.allocate({SlotName("cuda.shares"): Decimal("0.1")})
    alloc = amap.allocate({SlotName("cuda.shares"): Decimal("0.75")})
    assert sum(alloc["cuda.shares"].values()) == Decimal("0.75")


def test_whole_gpus_and_mig_instances_cannot_be_requested_together(start):
    plugin = start([fk.mig_gpu(0, ["1g.10gb"]), fk.FakeGpu(1)])
    mask = frozenset(d.device_id for d in plugin.devices)
    amap = plugin.create_alloc_map(plugin.device_slots(plugin.devices), mask)
    with pytest.raises(InvalidResourceCombination):
        amap.allocate({SlotName("cuda.device"): Decimal(1), SlotName("cuda.mig-1g.10gb"): 1})
