"""The kit's slot-kind checks: a sound plugin passes; a whole slot its map divides, a whole
slot of fractional capacity, and a quantum the map does not use each fail naming the rule."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any, ClassVar

import pytest

from accelkit.allocmap import AbstractAllocMap, FractionAllocMap
from accelkit.plugin import AbstractComputePlugin, AbstractLifecycleHook
from accelkit.types import (
    ComputeDevice,
    DeviceId,
    DeviceName,
    DeviceSlotInfo,
    SlotName,
    SlotSpec,
    SlotType,
    WorkloadConfig,
)

from .conformance_support import expect_broken, run_check

D = Decimal
DEVICE = SlotName("npu.device")
SHARES = SlotName("npu.shares")
CHECKS = ["test_device_capacities_fit_the_slot_kinds", "test_the_alloc_map_honours_the_slot_kinds"]
WHOLE_RULE = "a whole slot is granted in whole units only, each unit to one workload"
DIVISIBLE_RULE = "a divisible slot is granted in multiples of its quantum"


class Hook(AbstractLifecycleHook):
    async def pre_create(self) -> WorkloadConfig:
        return WorkloadConfig(env_vars={"NPUS": ",".join(self.allocated_device_ids)})


class Plugin(AbstractComputePlugin):
    """npu0..npu3 whole cards, npu4..npu7 cards of 4 shares, on one fraction map."""

    key = DeviceName("npu")
    api_version = "2.0"
    lifecycle_hook_class: ClassVar[type[AbstractLifecycleHook]] = Hook
    specs: ClassVar[tuple[SlotSpec, ...]] = (
        SlotSpec(DEVICE, SlotType.COUNT, divisible=False),
        SlotSpec(SHARES, SlotType.COUNT, divisible=True, quantum=D("0.25")),
    )
    card = D(1)
    shares = D(4)

    async def list_devices(self) -> Sequence[ComputeDevice]:
        return [ComputeDevice(self.key, f"npu{i}", f"pci:{i}", 0, 0, 1) for i in range(8)]

    def configurable_slots(self) -> Sequence[SlotSpec]:
        return self.specs

    def device_slots(self, devices: Iterable[ComputeDevice]) -> Mapping[DeviceId, DeviceSlotInfo]:
        return {
            d.device_id: DeviceSlotInfo(SlotType.COUNT, DEVICE, self.card)
            if int(d.device_id[3:]) < 4
            else DeviceSlotInfo(SlotType.COUNT, SHARES, self.shares)
            for d in devices
        }


class OwnMapPlugin(Plugin):
    """Builds its fraction map itself and forgets the slot kinds (the reproduction)."""

    def create_alloc_map(
        self, device_slots: Mapping[DeviceId, DeviceSlotInfo], device_mask: frozenset[DeviceId]
    ) -> AbstractAllocMap:
        return FractionAllocMap(device_slots, device_mask=device_mask, quantum_size=D("0.25"))


def variant(base: type[Plugin] = Plugin, **attributes: Any) -> Plugin:
    return type("BrokenPlugin", (base,), attributes)()


@pytest.mark.parametrize("check", CHECKS)
def test_a_sound_plugin_passes(check: str) -> None:
    run_check(check, Plugin())


@pytest.mark.parametrize("check", CHECKS)
def test_undeclared_kinds_pass_as_before(check: str) -> None:
    undeclared = (SlotSpec(DEVICE, SlotType.COUNT), SlotSpec(SHARES, SlotType.COUNT))
    run_check(check, variant(OwnMapPlugin, specs=undeclared))


def test_a_map_that_divides_a_whole_slot_fails() -> None:
    expect_broken(
        "test_the_alloc_map_honours_the_slot_kinds",
        OwnMapPlugin(),
        WHOLE_RULE,
        "declares slot(s) ['npu.device'] whole, but its alloc map divides them",
        "slot_specs=self.configurable_slots()",
    )


def test_a_map_that_grants_half_a_whole_slot_fails() -> None:
    class Lenient(FractionAllocMap):
        whole_slots = frozenset()  # type: ignore[assignment]
        divisible_slots: ClassVar[dict[SlotName, Decimal]] = {}  # type: ignore[misc]

    def create_alloc_map(
        self: Plugin, device_slots: Mapping[DeviceId, DeviceSlotInfo], mask: frozenset[DeviceId]
    ) -> AbstractAllocMap:
        return Lenient(device_slots, device_mask=mask, quantum_size=D("0.25"))

    expect_broken(
        "test_the_alloc_map_honours_the_slot_kinds",
        variant(create_alloc_map=create_alloc_map),
        WHOLE_RULE,
        "allocate({'npu.device': 0.5}) granted {'npu0': Decimal('0.5')}",
    )


def test_a_whole_slot_of_fractional_capacity_fails() -> None:
    expect_broken(
        "test_device_capacities_fit_the_slot_kinds",
        variant(card=D("1.5")),
        WHOLE_RULE,
        "device 'npu0' offers 1.5 of whole slot 'npu.device'",
    )


def test_a_capacity_off_the_quantum_fails() -> None:
    expect_broken(
        "test_device_capacities_fit_the_slot_kinds",
        variant(shares=D("3.1")),
        DIVISIBLE_RULE,
        "device 'npu4' offers 3.1 of 'npu.shares', not a multiple of its quantum 0.25",
    )


def test_a_divisible_slot_the_map_grants_whole_fails() -> None:
    specs = (
        SlotSpec(DEVICE, SlotType.COUNT, divisible=False),
        SlotSpec(SHARES, SlotType.COUNT, divisible=True),
    )

    def create_alloc_map(
        self: Plugin, device_slots: Mapping[DeviceId, DeviceSlotInfo], mask: frozenset[DeviceId]
    ) -> AbstractAllocMap:
        from accelkit.allocmap import DiscretePropertyAllocMap

        return DiscretePropertyAllocMap(device_slots, device_mask=mask)

    expect_broken(
        "test_the_alloc_map_honours_the_slot_kinds",
        variant(specs=specs, create_alloc_map=create_alloc_map),
        DIVISIBLE_RULE,
        "slot 'npu.shares' is declared divisible but its alloc map grants it whole",
    )


def test_a_quantum_the_map_does_not_use_fails() -> None:
    def create_alloc_map(
        self: Plugin, device_slots: Mapping[DeviceId, DeviceSlotInfo], mask: frozenset[DeviceId]
    ) -> AbstractAllocMap:
        # a map of quantum 0.5 told nothing about the kinds (so it cannot refuse them)
        return FractionAllocMap(
            device_slots, device_mask=mask, quantum_size=D("0.5"), slot_specs=self.specs[:1]
        )

    expect_broken(
        "test_the_alloc_map_honours_the_slot_kinds",
        variant(create_alloc_map=create_alloc_map),
        DIVISIBLE_RULE,
        "declared divisible by 0.25 but its alloc map divides it by 0.5",
        "quantum_size",
    )
