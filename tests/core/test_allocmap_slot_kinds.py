"""Slot kinds: a whole slot is granted in whole units only, whatever the map's other slots.

The regression of a plugin with one fractional slot: its fraction map divided every slot, so
``zeta.device=0.5`` twice gave both workloads ``zeta0``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelkit.allocmap import (
    AbstractAllocMap,
    AffinityHint,
    AffinityPolicy,
    AllocationStrategy,
    DiscretePropertyAllocMap,
    FractionAllocMap,
)
from accelkit.errors import (
    InsufficientResource,
    InvalidResourceArgument,
    PluginContractError,
    ResourceError,
)
from accelkit.partition import DevicePartition
from accelkit.plugin import AbstractComputePlugin, AbstractLifecycleHook
from accelkit.types import (
    AgentId,
    ComputeDevice,
    DeviceAllocation,
    DeviceId,
    DeviceName,
    DeviceSlotInfo,
    SlotName,
    SlotSpec,
    SlotType,
    WorkloadConfig,
)

D = Decimal
DEVICE = SlotName("zeta.device")
SHARES = SlotName("zeta.shares")
MIG = SlotName("zeta.mig-1g")


def zeta_slots() -> dict[DeviceId, DeviceSlotInfo]:
    """zeta0/zeta1 whole GPUs, zeta2/zeta3 of 1.0 in shares, one MIG-like instance."""
    return {
        DeviceId("zeta0"): DeviceSlotInfo(SlotType.COUNT, DEVICE, 1, 0),
        DeviceId("zeta1"): DeviceSlotInfo(SlotType.COUNT, DEVICE, 1, 0),
        DeviceId("zeta2"): DeviceSlotInfo(SlotType.COUNT, SHARES, 1, 0),
        DeviceId("zeta3"): DeviceSlotInfo(SlotType.COUNT, SHARES, 1, 1),
        DeviceId("zeta4"): DeviceSlotInfo(SlotType.UNIQUE, MIG, 1, 1),
    }


ZETA_SPECS = (
    SlotSpec(DEVICE, SlotType.COUNT, divisible=False),
    SlotSpec(SHARES, SlotType.COUNT, divisible=True, quantum=D("0.25")),
    SlotSpec(MIG, SlotType.UNIQUE),
)


class ZetaHook(AbstractLifecycleHook):
    async def pre_create(self) -> WorkloadConfig:
        return WorkloadConfig()


class ZetaPlugin(AbstractComputePlugin):
    """A third-party plugin of whole GPUs and GPU shares, on one fraction map."""

    key = DeviceName("zeta")
    api_version = "2.0"
    lifecycle_hook_class = ZetaHook
    specs: ClassVar[tuple[SlotSpec, ...]] = ZETA_SPECS

    async def list_devices(self) -> Sequence[ComputeDevice]:
        return [
            ComputeDevice(self.key, device_id, f"zeta:{device_id}", info.numa_node, 0, 1)
            for device_id, info in zeta_slots().items()
        ]

    def configurable_slots(self) -> Sequence[SlotSpec]:
        return self.specs

    def device_slots(self, devices: Iterable[ComputeDevice]) -> Mapping[DeviceId, DeviceSlotInfo]:
        known = zeta_slots()
        return {d.device_id: known[d.device_id] for d in devices}

    def create_alloc_map(
        self, device_slots: Mapping[DeviceId, DeviceSlotInfo], device_mask: frozenset[DeviceId]
    ) -> AbstractAllocMap:
        return self.fraction_alloc_map(device_slots, device_mask, quantum_size=D("0.25"))


class BareFractionZeta(ZetaPlugin):
    """Builds its fraction map itself, without telling it the slot kinds."""

    def create_alloc_map(
        self, device_slots: Mapping[DeviceId, DeviceSlotInfo], device_mask: frozenset[DeviceId]
    ) -> AbstractAllocMap:
        return FractionAllocMap(device_slots, device_mask=device_mask, quantum_size=D("0.25"))


async def _context_map(plugin: AbstractComputePlugin) -> AbstractAllocMap:
    await plugin.discover()
    ids = tuple(d.device_id for d in plugin.devices)
    return plugin.create_agent_context(AgentId("a"), DevicePartition(ids)).alloc_map


@pytest.mark.parametrize("strategy", list(AllocationStrategy))
def test_half_a_whole_slot_twice_is_refused_not_granted_twice(strategy: AllocationStrategy) -> None:
    m = FractionAllocMap(
        zeta_slots(), quantum_size=D("0.25"), strategy=strategy, slot_specs=ZETA_SPECS
    )
    for _ in range(2):
        with pytest.raises(InvalidResourceArgument, match=r"'zeta.device' is whole"):
            m.allocate({DEVICE: D("0.5")})
    first = m.allocate({DEVICE: D(1)})
    second = m.allocate({DEVICE: D(1)})
    assert first[DEVICE].keys() != second[DEVICE].keys()
    assert {*first[DEVICE], *second[DEVICE]} == {"zeta0", "zeta1"}
    assert all(v == 1 for g in (first, second) for v in g[DEVICE].values())
    with pytest.raises(InsufficientResource):
        m.allocate({DEVICE: D(1)})
    # the divisible slot of the same map is still divided
    assert m.allocate({SHARES: D("0.5")}) == {SHARES: {"zeta2": D("0.5")}}
    assert m.whole_slots == {DEVICE, MIG}
    assert m.divisible_slots == {SHARES: D("0.25")}


def test_a_plugin_context_refuses_half_a_whole_gpu() -> None:
    import asyncio

    m = asyncio.run(_context_map(ZetaPlugin()))
    with pytest.raises(InvalidResourceArgument, match=r"granted in whole units only, not 0.5"):
        m.allocate({DEVICE: D("0.5")}, context_tag="w1")
    assert m.allocate({DEVICE: D(2)}) == {DEVICE: {"zeta0": D(1), "zeta1": D(1)}}


def test_a_map_built_without_the_declared_kinds_is_refused() -> None:
    import asyncio

    with pytest.raises(PluginContractError, match=r"\['zeta.device'\] whole.*slot_specs="):
        asyncio.run(_context_map(BareFractionZeta()))


def test_grants_of_fractions_of_a_whole_slot_cannot_be_applied_or_freed() -> None:
    m = FractionAllocMap(zeta_slots(), quantum_size=D("0.25"), slot_specs=ZETA_SPECS)
    with pytest.raises(InvalidResourceArgument, match=r"cannot apply on 'zeta0'.*whole"):
        m.apply_allocation({DEVICE: {DeviceId("zeta0"): D("0.5")}})
    m.apply_allocation({DEVICE: {DeviceId("zeta0"): D(1)}})
    with pytest.raises(InvalidResourceArgument, match=r"cannot free on 'zeta0'.*whole"):
        m.free({DEVICE: {DeviceId("zeta0"): D("0.5")}})
    assert m.allocations[DEVICE] == {"zeta0": 1, "zeta1": 0}


def test_whole_slots_of_a_fraction_map_are_placed_as_a_discrete_map_places_them() -> None:
    slots = {DeviceId(f"g{i}"): DeviceSlotInfo(SlotType.COUNT, DEVICE, 10, 0) for i in range(3)}
    spec = (SlotSpec(DEVICE, SlotType.COUNT, divisible=False),)
    fraction = FractionAllocMap(slots, slot_specs=spec)
    discrete = DiscretePropertyAllocMap(slots)
    assert fraction.allocate({DEVICE: D(7)}) == discrete.allocate({DEVICE: D(7)})
    hint = AffinityHint(AffinityPolicy.PREFER_SINGLE_NODE, frozenset({0}))
    assert fraction.allocate({DEVICE: D(4)}, affinity_hint=hint) == discrete.allocate(
        {DEVICE: D(4)}, affinity_hint=hint
    )
    with pytest.raises(InsufficientResource):
        fraction.allocate({DEVICE: D("1E+999999")})
    with pytest.raises(InvalidResourceArgument, match="whole units only"):
        fraction.allocate({DEVICE: D("0.5")})


def test_undeclared_slots_keep_the_kind_their_map_gave_them() -> None:
    slots = {
        DeviceId("c0"): DeviceSlotInfo(SlotType.COUNT, SlotName("x.count"), 1),
        DeviceId("b0"): DeviceSlotInfo(SlotType.BYTES, SlotName("x.bytes"), 100),
        DeviceId("u0"): DeviceSlotInfo(SlotType.UNIQUE, SlotName("x.mig-a"), 1),
    }
    discrete = DiscretePropertyAllocMap(slots)
    assert discrete.whole_slots == {"x.count", "x.mig-a"}
    assert discrete.divisible_slots == {"x.bytes": 1}
    fraction = FractionAllocMap(slots, quantum_size=D("0.5"))
    assert fraction.whole_slots == {"x.mig-a"}
    assert fraction.divisible_slots == {"x.count": D("0.5"), "x.bytes": D("0.5")}
    assert fraction.allocate({SlotName("x.count"): D("0.5")}) == {"x.count": {"c0": D("0.5")}}


def test_a_declared_kind_the_map_cannot_honour_is_refused() -> None:
    slots = zeta_slots()
    with pytest.raises(InvalidResourceArgument, match=r"divisible by 0.25.*quantum is 0.5"):
        FractionAllocMap(slots, quantum_size=D("0.5"), slot_specs=ZETA_SPECS)
    with pytest.raises(InvalidResourceArgument, match="discrete map's unit is 1"):
        DiscretePropertyAllocMap(slots, slot_specs=ZETA_SPECS)
    unique_divisible = (SlotSpec(MIG, SlotType.COUNT, divisible=True),)
    with pytest.raises(InvalidResourceArgument, match="its devices report it UNIQUE"):
        DiscretePropertyAllocMap(slots, slot_specs=unique_divisible)
    with pytest.raises(InvalidResourceArgument, match="slot specs must be SlotSpec, got str"):
        DiscretePropertyAllocMap(slots, slot_specs=["zeta.device"])  # type: ignore[list-item]


def test_the_default_map_follows_the_declared_quantum() -> None:
    import asyncio

    class DefaultMapZeta(ZetaPlugin):
        create_alloc_map = AbstractComputePlugin.create_alloc_map

    m = asyncio.run(_context_map(DefaultMapZeta()))
    assert isinstance(m, FractionAllocMap)
    assert m.quantum_size == D("0.25")
    assert m.whole_slots == {DEVICE, MIG}
    with pytest.raises(InvalidResourceArgument, match="whole"):
        m.allocate({DEVICE: D("0.25")})

    class WholeOnly(DefaultMapZeta):
        specs = (SlotSpec(DEVICE, SlotType.COUNT, divisible=False),)

        def device_slots(
            self, devices: Iterable[ComputeDevice]
        ) -> Mapping[DeviceId, DeviceSlotInfo]:
            return {
                d.device_id: DeviceSlotInfo(SlotType.COUNT, DEVICE, 1, d.numa_node) for d in devices
            }

    assert isinstance(asyncio.run(_context_map(WholeOnly())), DiscretePropertyAllocMap)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"type": SlotType.UNIQUE, "divisible": True}, "UNIQUE .* cannot be divisible"),
        ({"type": SlotType.COUNT, "quantum": D("0.5")}, "only a divisible slot has a quantum"),
        ({"type": SlotType.COUNT, "divisible": False, "quantum": D(1)}, "only a divisible"),
        ({"type": SlotType.COUNT, "divisible": True, "quantum": D(0)}, "positive amount"),
        ({"type": SlotType.COUNT, "divisible": True, "quantum": D("1E+40")}, "positive amount"),
    ],
)
def test_slot_spec_refuses_kinds_that_contradict_themselves(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        SlotSpec(DEVICE, **kwargs)  # type: ignore[arg-type]


def test_slot_spec_kind_values() -> None:
    with pytest.raises(TypeError, match="divisible must be True, False or None"):
        SlotSpec(DEVICE, SlotType.COUNT, divisible="no")
    with pytest.raises(TypeError, match="amounts must be Decimal"):
        SlotSpec(DEVICE, SlotType.COUNT, divisible=True, quantum=0.5)
    assert SlotSpec(DEVICE, SlotType.COUNT, divisible=True, quantum="0.5").quantum == D("0.5")
    assert SlotSpec(MIG, SlotType.UNIQUE).whole
    assert SlotSpec(DEVICE, SlotType.COUNT, divisible=False).whole
    assert not SlotSpec(DEVICE, SlotType.COUNT).whole  # undeclared: the map decides


# -- the property: random mixes of whole and divisible slots in one map -------------------


@st.composite
def mixed_maps(draw: st.DrawFn) -> tuple[AbstractAllocMap, dict[SlotName, bool]]:
    """A map of 2-4 slots, each whole (devices of capacity 1) or divisible."""
    fractional = draw(st.booleans())
    quantum = draw(st.sampled_from([D("0.25"), D("0.5"), D("0.1")])) if fractional else D(1)
    whole: dict[SlotName, bool] = {}
    slots: dict[DeviceId, DeviceSlotInfo] = {}
    specs: list[SlotSpec] = []
    for s in range(draw(st.integers(2, 4))):
        name = SlotName(f"x.s{s}")
        is_whole = draw(st.booleans())
        slot_type = SlotType.UNIQUE if is_whole and draw(st.booleans()) else SlotType.COUNT
        whole[name] = is_whole or slot_type is SlotType.UNIQUE
        for i in range(draw(st.integers(1, 4))):
            cap = D(1) if whole[name] else quantum * draw(st.integers(1, 8))
            numa = draw(st.sampled_from([None, 0, 1]))
            slots[DeviceId(f"s{s}d{i}")] = DeviceSlotInfo(slot_type, name, cap, numa)
        if slot_type is SlotType.COUNT:
            divisible = not is_whole
            specs.append(SlotSpec(name, slot_type, divisible=divisible))
    strategy = draw(st.sampled_from(list(AllocationStrategy)))
    m: AbstractAllocMap
    if draw(st.booleans()):  # the map a plugin's agent gets by default, of the same specs
        quantum_specs = [
            SlotSpec(s.name, s.type, divisible=True, quantum=quantum) if s.divisible else s
            for s in specs
        ]
        return _plugin_map(slots, quantum_specs, strategy), whole
    if fractional:
        m = FractionAllocMap(slots, strategy=strategy, quantum_size=quantum, slot_specs=specs)
    else:
        m = DiscretePropertyAllocMap(slots, strategy=strategy, slot_specs=specs)
    return m, whole


def _plugin_map(
    slots: dict[DeviceId, DeviceSlotInfo], specs: list[SlotSpec], strategy: AllocationStrategy
) -> AbstractAllocMap:
    """The alloc map of an agent given every device of a plugin of these slots and kinds."""
    import asyncio

    class Mixed(ZetaPlugin):
        async def list_devices(self) -> Sequence[ComputeDevice]:
            return [
                ComputeDevice(self.key, d, f"x:{d}", i.numa_node, 0, 1) for d, i in slots.items()
            ]

        def configurable_slots(self) -> Sequence[SlotSpec]:
            return specs

        def device_slots(
            self, devices: Iterable[ComputeDevice]
        ) -> Mapping[DeviceId, DeviceSlotInfo]:
            return {d.device_id: slots[d.device_id] for d in devices}

        def allocation_strategy(self) -> AllocationStrategy:
            return strategy

        create_alloc_map = AbstractComputePlugin.create_alloc_map

    return asyncio.run(_context_map(Mixed()))


requests = st.lists(
    st.tuples(
        st.booleans(),  # allocate (True) or free a random live workload
        st.integers(0, 3),  # slot index
        st.sampled_from([D("0.1"), D("0.25"), D("0.5"), D(1), D("1.5"), D(2), D(3)]),
        st.none() | st.builds(AffinityHint, st.sampled_from(list(AffinityPolicy))),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(mixed_maps(), requests)
def test_no_map_grants_a_fraction_or_a_second_holder_of_a_whole_device(
    built: tuple[AbstractAllocMap, dict[SlotName, bool]],
    steps: list[tuple[bool, int, Decimal, AffinityHint | None]],
) -> None:
    m, whole = built
    names = sorted(whole)
    live: list[DeviceAllocation] = []
    for allocate, index, amount, hint in steps:
        if not allocate and live:
            m.free(live.pop(index % len(live)))
            continue
        slot = names[index % len(names)]
        try:
            grant = m.allocate({slot: amount}, affinity_hint=hint)
        except ResourceError:
            continue
        assert sum(grant[slot].values()) == amount
        if whole[slot]:
            assert amount == amount.to_integral_value(), "a fraction of a whole slot granted"
            assert all(v == 1 for v in grant[slot].values())
        live.append(grant)
        holders: dict[DeviceId, int] = {}
        for held in live:
            for name, per_device in held.items():
                if whole[name]:
                    for device_id in per_device:
                        holders[device_id] = holders.get(device_id, 0) + 1
        assert all(n == 1 for n in holders.values()), f"a whole device held twice: {holders}"
    for held in live:
        m.free(held)
    assert all(v == 0 for per in m.allocations.values() for v in per.values())
