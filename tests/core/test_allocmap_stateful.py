"""Stateful property tests: random allocate / free / apply sequences against a model.

The machine builds a map with random capacities, NUMA nodes, quantum, mask and strategy, then
checks after every step that the map agrees with a plain model of what should be allocated:
0 <= allocated <= capacity, grants are positive multiples of the quantum that add up to the
request, nothing outside the mask is touched, a failed call changes nothing, and freeing
everything brings the map back to zero.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import ClassVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from accelkit.allocmap import (
    AbstractAllocMap,
    AffinityHint,
    AffinityPolicy,
    AllocationStrategy,
    DiscretePropertyAllocMap,
    FractionAllocMap,
)
from accelkit.errors import (
    FractionalResourceFragmented,
    InsufficientResource,
    InvalidResourceArgument,
    NotMultipleOfQuantum,
    ResourceError,
)
from accelkit.types import DeviceId, DeviceSlotInfo, SlotName, SlotType

pytestmark = pytest.mark.slow  # stateful: hypothesis drives long operation sequences

D = Decimal
SLOT = SlotName("x.shares")
UNIQUE = SlotName("x.mig")
QUANTA = [D("0.01"), D("0.05"), D("0.25"), D("0.5"), D(1), D(2)]
hints = st.none() | st.builds(
    AffinityHint,
    st.sampled_from(list(AffinityPolicy)),
    st.frozensets(st.integers(0, 2), max_size=2),
)


class AllocMapMachine(RuleBasedStateMachine):
    """Both map kinds; subclasses fix the kind so each gets its share of the steps."""

    FRACTION: ClassVar[bool] = False
    steps: ClassVar[int] = 0

    def __init__(self) -> None:
        super().__init__()
        self.m: AbstractAllocMap
        self.caps: dict[DeviceId, Decimal] = {}  # usable capacity of every masked device
        self.slot_of: dict[DeviceId, SlotName] = {}
        self.all_devices: list[DeviceId] = []
        self.used: dict[DeviceId, Decimal] = {}
        self.live: list[Mapping[SlotName, Mapping[DeviceId, Decimal]]] = []
        self.quantum = D(1)

    @initialize(
        data=st.data(),
        n=st.integers(1, 6),
        n_unique=st.integers(0, 2),
        strategy=st.sampled_from(list(AllocationStrategy)),
        fragmentation=st.booleans(),
    )
    def build(
        self,
        data: st.DataObject,
        n: int,
        n_unique: int,
        strategy: AllocationStrategy,
        fragmentation: bool,
    ) -> None:
        if self.FRACTION:
            self.quantum = data.draw(st.sampled_from(QUANTA), label="quantum")
        q = self.quantum
        devices: dict[DeviceId, DeviceSlotInfo] = {}
        for i in range(n):
            node = data.draw(st.none() | st.integers(0, 2), label="node")
            if self.FRACTION:
                # Mostly multiples of the quantum, sometimes not (rounded down by the map).
                cap = data.draw(st.integers(0, 12), label="quanta") * q
                cap += data.draw(st.sampled_from([D(0), D(0), D("0.003")]), label="odd")
            else:
                cap = D(data.draw(st.integers(0, 12), label="cap"))
            devices[DeviceId(f"d{i}")] = DeviceSlotInfo(SlotType.COUNT, SLOT, cap, node)
        for i in range(n_unique):
            devices[DeviceId(f"u{i}")] = DeviceSlotInfo(SlotType.UNIQUE, UNIQUE, D(1), i % 2)
        self.all_devices = list(devices)
        use_mask = data.draw(st.booleans(), label="use_mask")
        mask = None
        if use_mask:
            mask = data.draw(st.sets(st.sampled_from(self.all_devices)), label="mask")
        if self.FRACTION:
            self.m = FractionAllocMap(
                devices,
                device_mask=mask,
                strategy=strategy,
                quantum_size=q,
                allow_fragmentation=fragmentation,
            )
        else:
            self.m = DiscretePropertyAllocMap(devices, device_mask=mask, strategy=strategy)
        masked = set(devices) if mask is None else set(mask)
        for dev, info in devices.items():
            self.slot_of[dev] = info.slot_name
            if dev in masked:
                if info.slot_type is SlotType.UNIQUE:
                    self.caps[dev] = D(1)
                else:
                    self.caps[dev] = (info.amount // q) * q
                self.used[dev] = D(0)

    # -- helpers ------------------------------------------------------------------------------

    def free_of(self, slot: SlotName) -> Decimal:
        return sum(
            (self.caps[d] - self.used[d] for d in self.caps if self.slot_of[d] == slot), D(0)
        )

    def expect_unchanged(self, before: Mapping[SlotName, Mapping[DeviceId, Decimal]]) -> None:
        assert self.m.allocations == before

    # -- rules --------------------------------------------------------------------------------

    @rule(
        k=st.integers(0, 40), odd=st.sampled_from([D(0)] * 6 + [D("0.5"), D("0.001")]), hint=hints
    )
    def allocate(self, k: int, odd: Decimal, hint: AffinityHint | None) -> None:
        type(self).steps += 1
        q = self.quantum
        request = k * q / 4 if self.FRACTION else D(k // 3)
        request += odd
        free_before = {d: self.caps[d] - self.used[d] for d in self.caps if self.slot_of[d] == SLOT}
        before = self.m.allocations
        error: ResourceError | None = None
        try:
            alloc = self.m.allocate({SLOT: request}, affinity_hint=hint)
        except ResourceError as exc:
            error = exc
        if error is not None:
            self.expect_unchanged(before)
            whole = request % q == 0
            assert request > 0
            if isinstance(error, InsufficientResource):
                assert whole
                assert request > self.free_of(SLOT)
                assert error.allocatable == self.free_of(SLOT)
                assert error.requested == request
            elif isinstance(error, FractionalResourceFragmented):
                assert self.FRACTION
                assert not self.m.allow_fragmentation  # type: ignore[attr-defined]
            else:
                expected = NotMultipleOfQuantum if self.FRACTION else InvalidResourceArgument
                assert isinstance(error, expected)
                assert not whole
            return
        if request == 0:
            assert alloc == {}
            return
        assert request % q == 0
        grants = alloc[SLOT]
        assert sum(grants.values()) == request
        for dev, amount in grants.items():
            assert dev in self.caps, "granted a device outside the mask or another slot"
            assert self.slot_of[dev] == SLOT
            assert amount > 0
            assert amount % q == 0
            assert amount <= free_before[dev]
        # Book it before the remaining checks so teardown can still free it on a failure.
        for dev, amount in grants.items():
            self.used[dev] += amount
        self.live.append(alloc)
        if self.FRACTION and any(f >= request for f in free_before.values()):
            assert len(grants) == 1, "a request that fits on one device went to several"

    @rule(hint=hints)
    def allocate_unique(self, hint: AffinityHint | None) -> None:
        type(self).steps += 1
        before = self.m.allocations
        try:
            alloc = self.m.allocate({UNIQUE: D(1)}, affinity_hint=hint)
        except InsufficientResource:
            self.expect_unchanged(before)
            assert self.free_of(UNIQUE) == 0
            return
        except InvalidResourceArgument:
            assert UNIQUE not in self.slot_of.values()
            return
        ((dev, amount),) = alloc[UNIQUE].items()
        assert amount == 1
        assert self.used[dev] == 0
        self.used[dev] = D(1)
        self.live.append(alloc)

    @precondition(lambda self: self.live)
    @rule(i=st.integers(0, 1000))
    def free(self, i: int) -> None:
        type(self).steps += 1
        alloc = self.live.pop(i % len(self.live))
        self.m.free(alloc)
        for per in alloc.values():
            for dev, amount in per.items():
                self.used[dev] -= amount

    @precondition(lambda self: self.live)
    @rule(i=st.integers(0, 1000))
    def double_free_is_refused(self, i: int) -> None:
        type(self).steps += 1
        alloc = self.live[i % len(self.live)]
        # Freeing twice what is held (when no other allocation covers it) must fail.
        overdraft = {s: {d: a + self.used[d] for d, a in per.items()} for s, per in alloc.items()}
        before = self.m.allocations
        with pytest.raises(InvalidResourceArgument):
            self.m.free(overdraft)
        self.expect_unchanged(before)

    @rule(data=st.data(), k=st.integers(0, 30))
    def apply(self, data: st.DataObject, k: int) -> None:
        type(self).steps += 1
        dev = data.draw(st.sampled_from([*self.all_devices, DeviceId("ghost")]), label="dev")
        slot = data.draw(st.sampled_from([SLOT, UNIQUE]), label="slot")
        amount = k * self.quantum / 3 if self.FRACTION else D(k // 4)
        valid = (
            dev in self.caps
            and self.slot_of[dev] == slot
            and amount % self.quantum == 0
            and (slot != UNIQUE or amount % 1 == 0)
            and amount <= self.caps[dev] - self.used[dev]
        )
        before = self.m.allocations
        alloc = {slot: {dev: amount}}
        if valid:
            self.m.apply_allocation(alloc)
            if amount:
                self.used[dev] += amount
                self.live.append(alloc)
        else:
            with pytest.raises(InvalidResourceArgument):
                self.m.apply_allocation(alloc)
            self.expect_unchanged(before)

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    def agrees_with_the_model(self) -> None:
        allocations = self.m.allocations
        seen = {d for per in allocations.values() for d in per}
        assert seen == set(self.caps), "allocations must list exactly the masked devices"
        for slot, per in allocations.items():
            for dev, amount in per.items():
                assert self.slot_of[dev] == slot
                assert amount == self.used[dev]
                assert 0 <= amount <= self.caps[dev]
        for slot, free in self.m.allocatable().items():
            assert free == self.free_of(slot)
            assert self.m.capacity()[slot] == sum(
                (c for d, c in self.caps.items() if self.slot_of[d] == slot), D(0)
            )

    def teardown(self) -> None:
        if not hasattr(self, "m"):
            return
        for alloc in self.live:
            self.m.free(alloc)
        assert all(v == 0 for per in self.m.allocations.values() for v in per.values())
        assert self.m.allocatable() == self.m.capacity()


class DiscreteMachine(AllocMapMachine):
    FRACTION = False
    steps = 0


class FractionMachine(AllocMapMachine):
    FRACTION = True
    steps = 0


SETTINGS = settings(
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@pytest.mark.parametrize(
    "machine", [DiscreteMachine, FractionMachine], ids=["discrete", "fraction"]
)
def test_alloc_map_state_machine(machine: type[AllocMapMachine]) -> None:
    machine.steps = 0
    run_state_machine_as_test(machine, settings=SETTINGS)
    # Keep the run honest: at least 5,000 rule steps per map kind (10,000 in all).
    assert machine.steps >= 5_000, machine.steps
