"""Discrete alloc maps: strategies, validation, atomicity, masks, UNIQUE and exclusive slots."""

from __future__ import annotations

from decimal import Decimal

import pytest

from accelkit.allocmap import (
    AbstractAllocMap,
    AllocationStrategy,
    DiscretePropertyAllocMap,
)
from accelkit.errors import (
    InsufficientResource,
    InvalidResourceArgument,
    InvalidResourceCombination,
    ResourceError,
)
from accelkit.types import DeviceId, DeviceSlotInfo, SlotName, SlotType

D = Decimal
FILL, EVENLY = AllocationStrategy.FILL, AllocationStrategy.EVENLY


def slots(
    caps: list[int | str],
    slot: str = "cpu",
    slot_type: SlotType = SlotType.COUNT,
    prefix: str = "d",
) -> dict[DeviceId, DeviceSlotInfo]:
    return {
        DeviceId(f"{prefix}{i}"): DeviceSlotInfo(slot_type, SlotName(slot), D(c))
        for i, c in enumerate(caps)
    }


def used(m: AbstractAllocMap, slot: str = "cpu") -> dict[str, Decimal]:
    return {str(d): a for d, a in m.allocations[SlotName(slot)].items()}


def test_is_an_abstract_alloc_map() -> None:
    m = DiscretePropertyAllocMap(slots([1]))
    assert isinstance(m, AbstractAllocMap)
    assert m.strategy is EVENLY
    with pytest.raises(TypeError):
        AbstractAllocMap(slots([1]))  # type: ignore[abstract]


# -- EVENLY -------------------------------------------------------------------------------


def test_evenly_splits_evenly_then_gives_the_remainder_to_the_first_device() -> None:
    m = DiscretePropertyAllocMap(slots([100, 100]))
    assert m.allocate({SlotName("cpu"): D(130)}) == {"cpu": {"d0": D(65), "d1": D(65)}}
    assert m.allocate({SlotName("cpu"): D(15)}) == {"cpu": {"d0": D(8), "d1": D(7)}}
    assert used(m) == {"d0": D(73), "d1": D(72)}


def test_evenly_three_devices() -> None:
    m = DiscretePropertyAllocMap(slots([10, 10, 10]))
    assert m.allocate({SlotName("cpu"): D(7)}) == {"cpu": {"d0": D(3), "d1": D(2), "d2": D(2)}}


def test_evenly_remainder_goes_to_the_most_free_device() -> None:
    m = DiscretePropertyAllocMap(slots([10, 10, 10]))
    m.apply_allocation({SlotName("cpu"): {DeviceId("d0"): D(5)}})
    # Free 5/10/10, request 4: one each, and the unit left over goes to the most free
    # device listed first (d1), not to d0.
    assert m.allocate({SlotName("cpu"): D(4)}) == {"cpu": {"d0": D(1), "d1": D(2), "d2": D(1)}}


def test_evenly_fills_small_devices_and_spreads_the_rest() -> None:
    m = DiscretePropertyAllocMap(slots([2, 10, 10]))
    assert m.allocate({SlotName("cpu"): D(12)}) == {"cpu": {"d0": D(2), "d1": D(5), "d2": D(5)}}


def test_evenly_small_request_on_unit_devices_uses_the_first_free_ones() -> None:
    m = DiscretePropertyAllocMap(slots([1] * 8))
    assert m.allocate({SlotName("cpu"): D(3)}) == {"cpu": {"d0": D(1), "d1": D(1), "d2": D(1)}}
    assert m.allocate({SlotName("cpu"): D(2)}) == {"cpu": {"d3": D(1), "d4": D(1)}}


def test_evenly_everything() -> None:
    m = DiscretePropertyAllocMap(slots([3, 1, 2]))
    assert m.allocate({SlotName("cpu"): D(6)}) == {"cpu": {"d0": D(3), "d1": D(1), "d2": D(2)}}
    assert m.allocatable() == {"cpu": D(0)}


# -- FILL ---------------------------------------------------------------------------------


def test_fill_takes_from_the_most_free_device_first() -> None:
    m = DiscretePropertyAllocMap(slots([4, 6, 5]), strategy=FILL)
    assert m.allocate({SlotName("cpu"): D(8)}) == {"cpu": {"d1": D(6), "d2": D(2)}}
    assert m.allocate({SlotName("cpu"): D(4)}) == {"cpu": {"d0": D(4)}}
    assert used(m) == {"d0": D(4), "d1": D(6), "d2": D(2)}


def test_fill_on_ties_uses_device_order() -> None:
    m = DiscretePropertyAllocMap(slots([10, 10, 10]), strategy=FILL)
    assert m.allocate({SlotName("cpu"): D(7)}) == {"cpu": {"d0": D(7)}}
    assert m.allocate({SlotName("cpu"): D(7)}) == {"cpu": {"d1": D(7)}}
    assert m.allocate({SlotName("cpu"): D(7)}) == {"cpu": {"d2": D(7)}}
    assert m.allocate({SlotName("cpu"): D(4)}) == {"cpu": {"d0": D(3), "d1": D(1)}}


def test_strategy_accepts_its_string_value() -> None:
    m = DiscretePropertyAllocMap(slots([1]), strategy="fill")  # type: ignore[arg-type]
    assert m.strategy is FILL


def test_bytes_single_device_fill() -> None:
    gib = 2**30
    m = DiscretePropertyAllocMap(
        slots([256 * gib], slot="mem", slot_type=SlotType.BYTES, prefix="root"), strategy=FILL
    )
    a = m.allocate({SlotName("mem"): D(5 * gib)})
    assert a == {"mem": {"root0": D(5 * gib)}}
    # Plain integer form, never 5.36870912E+9.
    assert str(a[SlotName("mem")][DeviceId("root0")]) == "5368709120"
    assert m.allocatable() == {"mem": D(251 * gib)}
    m.free(a)
    assert m.allocatable() == {"mem": D(256 * gib)}


# -- request validation -------------------------------------------------------------------


@pytest.mark.parametrize("amount", [D("1.5"), D("0.5"), "2.5"])
def test_count_requests_must_be_whole(amount: object) -> None:
    m = DiscretePropertyAllocMap(slots([4, 4]))
    with pytest.raises(InvalidResourceArgument, match="whole"):
        m.allocate({SlotName("cpu"): amount})  # type: ignore[dict-item]
    assert used(m) == {"d0": 0, "d1": 0}


def test_whole_amounts_in_other_forms_are_accepted() -> None:
    m = DiscretePropertyAllocMap(slots([4, 4]), strategy=FILL)
    assert m.allocate({SlotName("cpu"): D("2.000")}) == {"cpu": {"d0": D(2)}}
    assert m.allocate({SlotName("cpu"): 1}) == {"cpu": {"d1": D(1)}}  # type: ignore[dict-item]
    assert m.allocate({SlotName("cpu"): "1"}) == {"cpu": {"d1": D(1)}}  # type: ignore[dict-item]


def test_zero_requests_are_skipped() -> None:
    m = DiscretePropertyAllocMap(slots([4]))
    assert m.allocate({SlotName("cpu"): D(0)}) == {}
    assert m.allocate({SlotName("cpu"): D("-0")}) == {}
    assert m.allocate({}) == {}
    assert m.allocate({SlotName("nope"): D(0)}) == {}  # nothing asked, nothing to refuse
    assert used(m) == {"d0": 0}


def test_negative_request_is_refused() -> None:
    m = DiscretePropertyAllocMap(slots([4]))
    with pytest.raises(InvalidResourceArgument, match="negative"):
        m.allocate({SlotName("cpu"): D(-1)})


def test_a_slot_no_device_offers_is_insufficient_with_nothing_allocatable() -> None:
    m = DiscretePropertyAllocMap(slots([4]))
    for request in ({SlotName("gpu"): D(1)}, {SlotName("cpu"): D(1), SlotName("gpu"): D(2)}):
        with pytest.raises(InsufficientResource, match="no device offers slot 'gpu'") as err:
            m.allocate(request, context_tag="agent-1")
        assert (err.value.slot, err.value.requested) == ("gpu", D(len(request)))
        assert err.value.allocatable == 0
        assert str(err.value).startswith("[agent-1] ")
    assert m.allocatable() == {"cpu": D(4)}  # nothing was allocated
    # a malformed amount is still malformed, whatever the slot
    with pytest.raises(InvalidResourceArgument, match="negative"):
        m.allocate({SlotName("gpu"): D(-1)})


def test_a_slot_whose_devices_are_all_masked_offers_nothing() -> None:
    devices = {**slots([4]), DeviceId("g0"): DeviceSlotInfo(SlotType.COUNT, SlotName("gpu"), D(1))}
    m = DiscretePropertyAllocMap(devices, device_mask=["d0"])
    with pytest.raises(InsufficientResource, match="no device offers slot 'gpu'"):
        m.allocate({SlotName("gpu"): D(1)})


@pytest.mark.parametrize(
    "amount", [1.0, 2.5, True, None, [1], "abc", D("NaN"), D("sNaN"), D("Inf")]
)
def test_floats_and_junk_are_refused(amount: object) -> None:
    m = DiscretePropertyAllocMap(slots([4]))
    with pytest.raises(InvalidResourceArgument):
        m.allocate({SlotName("cpu"): amount})  # type: ignore[dict-item]
    assert used(m) == {"d0": 0}


def test_insufficient_resource_carries_slot_requested_and_allocatable() -> None:
    m = DiscretePropertyAllocMap(slots([4, 4]))
    m.allocate({SlotName("cpu"): D(5)})
    with pytest.raises(InsufficientResource) as info:
        m.allocate({SlotName("cpu"): D(4)}, context_tag="agent-7")
    err = info.value
    assert (err.slot, err.requested, err.allocatable) == ("cpu", D(4), D(3))
    assert "agent-7" in str(err)
    assert "requested 4" in str(err)
    assert "3 allocatable" in str(err)
    assert m.allocatable() == {"cpu": D(3)}


def test_insufficient_message_is_in_plain_form() -> None:
    m = DiscretePropertyAllocMap(slots([10], slot="mem", slot_type=SlotType.BYTES))
    with pytest.raises(InsufficientResource) as info:
        m.allocate({SlotName("mem"): D("2E+3")})
    assert "requested 2000" in str(info.value)
    assert info.value.requested == 2000


def test_allocate_returns_only_devices_granted_something() -> None:
    m = DiscretePropertyAllocMap(slots([10, 10, 10]))
    assert m.allocate({SlotName("cpu"): D(2)}) == {"cpu": {"d0": D(1), "d1": D(1)}}


# -- atomicity of multi-slot requests ---------------------------------------------------------


def two_slot_map(**kw: object) -> DiscretePropertyAllocMap:
    devices = {**slots([4, 4]), **slots([2], slot="mem", slot_type=SlotType.BYTES, prefix="m")}
    return DiscretePropertyAllocMap(devices, **kw)  # type: ignore[arg-type]


def test_multi_slot_allocation_grants_every_slot() -> None:
    m = two_slot_map()
    a = m.allocate({SlotName("cpu"): D(2), SlotName("mem"): D(1)})
    assert a == {"cpu": {"d0": D(1), "d1": D(1)}, "mem": {"m0": D(1)}}
    m.free(a)
    assert m.allocatable() == {"cpu": D(8), "mem": D(2)}


@pytest.mark.parametrize(
    ("request_", "error"),
    [
        ({"cpu": D(2), "mem": D(3)}, InsufficientResource),
        ({"cpu": D(2), "mem": D("0.5")}, InvalidResourceArgument),
        ({"cpu": D(2), "gpu": D(1)}, InsufficientResource),
        ({"cpu": D(2), "mem": D(-1)}, InvalidResourceArgument),
    ],
)
def test_multi_slot_failure_changes_nothing(request_: dict[str, Decimal], error: type) -> None:
    m = two_slot_map()
    before = m.allocations
    with pytest.raises(error):
        m.allocate(request_)  # type: ignore[arg-type]
    assert m.allocations == before
    assert m.allocatable() == {"cpu": D(8), "mem": D(2)}


# -- UNIQUE slots -----------------------------------------------------------------------------


def unique_map() -> DiscretePropertyAllocMap:
    devices = {
        **slots([1, 1], slot="cuda.mig-1g.10gb", slot_type=SlotType.UNIQUE, prefix="mig"),
        **slots([1, 1], slot="cuda.device", prefix="cuda"),
    }
    return DiscretePropertyAllocMap(devices)


def test_unique_slot_hands_out_one_whole_device_per_request() -> None:
    m = unique_map()
    a = m.allocate({SlotName("cuda.mig-1g.10gb"): D(1)})
    b = m.allocate({SlotName("cuda.mig-1g.10gb"): D(1)})
    assert a == {"cuda.mig-1g.10gb": {"mig0": D(1)}}
    assert b == {"cuda.mig-1g.10gb": {"mig1": D(1)}}
    with pytest.raises(InsufficientResource):
        m.allocate({SlotName("cuda.mig-1g.10gb"): D(1)})
    m.free(a)
    assert m.allocate({SlotName("cuda.mig-1g.10gb"): D(1)}) == a


@pytest.mark.parametrize("amount", [D(2), D("0.5")])
def test_unique_slot_requests_must_be_exactly_one(amount: Decimal) -> None:
    m = unique_map()
    with pytest.raises(InvalidResourceArgument):
        m.allocate({SlotName("cuda.mig-1g.10gb"): amount})
    assert m.allocatable()[SlotName("cuda.mig-1g.10gb")] == 2


def test_unique_device_counts_as_one_whatever_its_amount() -> None:
    m = DiscretePropertyAllocMap(slots([5], slot="x.u", slot_type=SlotType.UNIQUE))
    assert m.capacity() == {"x.u": D(1)}
    assert m.allocate({SlotName("x.u"): D(1)}) == {"x.u": {"d0": D(1)}}
    with pytest.raises(InvalidResourceArgument):
        m.apply_allocation({SlotName("x.u"): {DeviceId("d0"): D(1)}})


def test_mixed_slot_types_under_one_name_are_refused() -> None:
    devices = {
        DeviceId("a"): DeviceSlotInfo(SlotType.COUNT, SlotName("x.s"), D(1)),
        DeviceId("b"): DeviceSlotInfo(SlotType.UNIQUE, SlotName("x.s"), D(1)),
    }
    with pytest.raises(InvalidResourceArgument, match="both"):
        DiscretePropertyAllocMap(devices)


# -- exclusive slot types ---------------------------------------------------------------------


def exclusive_map() -> DiscretePropertyAllocMap:
    devices = {
        **slots([1], slot="cuda.mig-1g.10gb", slot_type=SlotType.UNIQUE, prefix="a"),
        **slots([1], slot="cuda.mig-2g.20gb", slot_type=SlotType.UNIQUE, prefix="b"),
        **slots([1, 1], slot="cuda.device", prefix="cuda"),
        **slots([4], slot="cpu", prefix="core"),
    }
    return DiscretePropertyAllocMap(devices, exclusive_slot_types=["cuda.device", "cuda.mig-*"])


def test_slots_of_different_exclusive_patterns_cannot_be_combined() -> None:
    m = exclusive_map()
    with pytest.raises(InvalidResourceCombination, match=r"cuda\.device"):
        m.allocate({SlotName("cuda.device"): D(1), SlotName("cuda.mig-1g.10gb"): D(1)})
    assert m.allocatable()[SlotName("cuda.device")] == 2
    assert m.allocatable()[SlotName("cuda.mig-1g.10gb")] == 1


def test_slots_of_one_exclusive_pattern_combine_and_unmatched_slots_combine_with_all() -> None:
    m = exclusive_map()
    a = m.allocate(
        {
            SlotName("cuda.mig-1g.10gb"): D(1),
            SlotName("cuda.mig-2g.20gb"): D(1),
            SlotName("cpu"): D(2),
        }
    )
    assert set(a) == {"cuda.mig-1g.10gb", "cuda.mig-2g.20gb", "cpu"}
    assert set(m.allocate({SlotName("cuda.device"): D(1), SlotName("cpu"): D(1)})) == {
        "cuda.device",
        "cpu",
    }


def test_zero_requests_do_not_count_for_exclusivity() -> None:
    m = exclusive_map()
    a = m.allocate({SlotName("cuda.device"): D(1), SlotName("cuda.mig-1g.10gb"): D(0)})
    assert a == {"cuda.device": {"cuda0": D(1)}}


def test_a_single_string_is_one_pattern() -> None:
    devices = {**slots([1], slot="x.a"), **slots([1], slot="y.b", prefix="e")}
    m = DiscretePropertyAllocMap(devices, exclusive_slot_types="x.*")
    assert m.allocate({SlotName("x.a"): D(1), SlotName("y.b"): D(1)})


# -- device masks -------------------------------------------------------------------------------


def test_mask_restricts_every_view_and_operation() -> None:
    m = DiscretePropertyAllocMap(slots([1, 1, 1, 1]), device_mask=[DeviceId("d1"), DeviceId("d3")])
    assert m.device_mask == frozenset({"d1", "d3"})
    assert set(m.device_slots) == {"d1", "d3"}
    assert used(m) == {"d1": 0, "d3": 0}
    assert m.capacity() == {"cpu": D(2)}
    assert m.allocate({SlotName("cpu"): D(2)}) == {"cpu": {"d1": D(1), "d3": D(1)}}
    with pytest.raises(InsufficientResource):
        m.allocate({SlotName("cpu"): D(1)})


def test_default_mask_is_every_device() -> None:
    m = DiscretePropertyAllocMap(slots([1, 1]))
    assert m.device_mask == frozenset({"d0", "d1"})


def test_mask_with_unknown_devices_is_refused() -> None:
    with pytest.raises(InvalidResourceArgument, match="ghost"):
        DiscretePropertyAllocMap(slots([1]), device_mask=[DeviceId("d0"), DeviceId("ghost")])


def test_a_device_without_slot_info_is_refused_naming_it() -> None:
    bad: dict[DeviceId, object] = {DeviceId("d0"): 5}
    with pytest.raises(InvalidResourceArgument, match="device 'd0': expected a DeviceSlotInfo"):
        DiscretePropertyAllocMap(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("strategy", ["FILL", "most-free", ""])
def test_an_unknown_strategy_is_refused_listing_the_strategies(strategy: str) -> None:
    with pytest.raises(InvalidResourceArgument, match="use 'fill', 'evenly'"):
        DiscretePropertyAllocMap(slots([1]), strategy=strategy)  # type: ignore[arg-type]
    assert DiscretePropertyAllocMap(slots([1]), strategy="fill").strategy is AllocationStrategy.FILL  # type: ignore[arg-type]


def test_slot_whose_devices_are_all_masked_out_is_insufficient_not_unknown() -> None:
    devices = {**slots([1]), **slots([1], slot="cuda.device", prefix="cuda")}
    m = DiscretePropertyAllocMap(devices, device_mask=[DeviceId("d0")])
    with pytest.raises(InsufficientResource) as info:
        m.allocate({SlotName("cuda.device"): D(1)})
    assert info.value.allocatable == 0
    assert set(m.allocations) == {"cpu"}


# -- apply_allocation and free ------------------------------------------------------------------


def test_apply_then_free_round_trip() -> None:
    m = DiscretePropertyAllocMap(slots([4, 4]))
    m.apply_allocation({SlotName("cpu"): {DeviceId("d0"): D(3), DeviceId("d1"): D(0)}})
    assert used(m) == {"d0": D(3), "d1": D(0)}
    m.free({SlotName("cpu"): {DeviceId("d0"): D(2)}})
    assert used(m) == {"d0": D(1), "d1": D(0)}
    m.free({SlotName("cpu"): {DeviceId("d0"): "1"}})  # type: ignore[dict-item]
    assert used(m) == {"d0": D(0), "d1": D(0)}


def masked_map() -> DiscretePropertyAllocMap:
    devices = {**slots([4, 4]), **slots([8], slot="mem", slot_type=SlotType.BYTES, prefix="m")}
    return DiscretePropertyAllocMap(devices, device_mask=[DeviceId("d0"), DeviceId("m0")])


BAD_ALLOCATIONS = [
    pytest.param({"cpu": {"ghost": D(1)}}, "unknown device", id="unknown-device"),
    pytest.param({"cpu": {"d1": D(1)}}, "outside the device mask", id="outside-mask"),
    pytest.param({"cpu": {"m0": D(1)}}, "provides slot 'mem'", id="slot-mismatch"),
    pytest.param({"gpu": {"d0": D(1)}}, "unknown slot", id="unknown-slot"),
    pytest.param({"cpu": {"d0": D(-1)}}, "negative", id="negative"),
    pytest.param({"cpu": {"d0": D("0.5")}}, "whole", id="fractional"),
    pytest.param({"cpu": {"d0": 1.0}}, "Decimal", id="float"),
]


@pytest.mark.parametrize(("alloc", "match"), BAD_ALLOCATIONS)
@pytest.mark.parametrize("op", ["apply_allocation", "free"])
def test_bad_allocations_are_refused_and_change_nothing(
    alloc: dict[str, dict[str, Decimal]], match: str, op: str
) -> None:
    m = masked_map()
    m.apply_allocation(
        {SlotName("cpu"): {DeviceId("d0"): D(2)}, SlotName("mem"): {DeviceId("m0"): D(1)}}
    )
    before = m.allocations
    # The bad entry comes after a good one, so a half-done operation would show.
    good = {"mem": {"m0": D(1)}}
    with pytest.raises(InvalidResourceArgument, match=match):
        getattr(m, op)({**good, **alloc})
    assert m.allocations == before


def test_apply_over_capacity_is_refused_and_changes_nothing() -> None:
    m = masked_map()
    m.apply_allocation({SlotName("cpu"): {DeviceId("d0"): D(3)}})
    with pytest.raises(InvalidResourceArgument, match="only 1 free"):
        m.apply_allocation(
            {SlotName("mem"): {DeviceId("m0"): D(1)}, SlotName("cpu"): {DeviceId("d0"): D(2)}}
        )
    assert m.allocations == {"cpu": {"d0": D(3)}, "mem": {"m0": D(0)}}


def test_freeing_more_than_allocated_is_refused() -> None:
    m = masked_map()
    a = m.allocate({SlotName("mem"): D(5)})
    m.free(a)
    with pytest.raises(InvalidResourceArgument, match="only 0 allocated"):
        m.free(a)  # a double free
    with pytest.raises(InvalidResourceArgument, match="allocated"):
        m.free({SlotName("mem"): {DeviceId("m0"): D(9)}})
    assert m.allocatable() == {"cpu": D(4), "mem": D(8)}


def test_failed_calls_are_resource_errors() -> None:
    m = masked_map()
    for call in (
        lambda: m.allocate({SlotName("cpu"): D(99)}),
        lambda: m.free({SlotName("cpu"): {DeviceId("d0"): D(1)}}),
        lambda: m.apply_allocation({SlotName("cpu"): {DeviceId("ghost"): D(1)}}),
    ):
        with pytest.raises(ResourceError):
            call()


def test_capacity_rounds_fractional_discrete_capacity_down() -> None:
    m = DiscretePropertyAllocMap(slots(["2.5", "1"]))
    assert m.capacity() == {"cpu": D(3)}
    assert m.allocations == {"cpu": {"d0": D(0), "d1": D(0)}}


def test_allocations_is_a_snapshot() -> None:
    m = DiscretePropertyAllocMap(slots([2]))
    snap = m.allocations
    m.allocate({SlotName("cpu"): D(1)})
    assert snap == {"cpu": {"d0": D(0)}}
    assert m.allocations == {"cpu": {"d0": D(1)}}


# -- a map of one single-device slot (the mem root) takes a specialised path -------------------


def mem_map(**kw: object) -> DiscretePropertyAllocMap:
    devices = {DeviceId("root"): DeviceSlotInfo(SlotType.BYTES, SlotName("mem"), D(1000))}
    return DiscretePropertyAllocMap(devices, **kw)  # type: ignore[arg-type]


def test_single_device_map_round_trip() -> None:
    m = mem_map(strategy=FILL)
    mem = SlotName("mem")
    a = m.allocate({mem: D(300)})
    b = m.allocate({mem: D(300)})
    assert a == b == {"mem": {"root": D(300)}}
    m.free(a)
    assert m.allocatable() == {"mem": D(700)}
    m.free({mem: {DeviceId("root"): D("300.0")}})  # equal value, other form
    assert m.allocatable() == {"mem": D(1000)}
    assert m.allocate.__doc__ == DiscretePropertyAllocMap.allocate.__doc__


def test_single_device_map_refuses_what_the_general_path_refuses() -> None:
    m = mem_map()
    mem = SlotName("mem")
    held = m.allocate({mem: D(600)})
    with pytest.raises(InsufficientResource) as info:
        m.allocate({mem: D(600)}, context_tag="job-9")
    assert (info.value.slot, info.value.requested, info.value.allocatable) == (
        "mem",
        D(600),
        D(400),
    )
    assert "job-9" in str(info.value)
    for bad in (D("sNaN"), D("NaN"), D("0.5"), D(-1), 1.0):
        with pytest.raises(InvalidResourceArgument):
            m.allocate({mem: bad})  # type: ignore[dict-item]
    assert m.allocate({mem: 5}) == {"mem": {"root": D(5)}}  # type: ignore[dict-item]
    assert m.allocate({mem: D(0)}) == {}
    with pytest.raises(InsufficientResource, match="no device offers slot 'cpu'"):
        m.allocate({SlotName("cpu"): D(1)})
    bad_frees = [
        {mem: {DeviceId("other"): D(1)}},
        {mem: {DeviceId("root"): D(606)}},
        {mem: {DeviceId("root"): D("sNaN")}},
        {mem: {DeviceId("root"): 1.0}},
        {SlotName("cpu"): {DeviceId("root"): D(1)}},
    ]
    for alloc in bad_frees:
        with pytest.raises(InvalidResourceArgument):
            m.free(alloc)  # type: ignore[arg-type]
    assert m.allocatable() == {"mem": D(395)}
    m.free(held)
    with pytest.raises(InvalidResourceArgument):
        m.free(held)
    assert m.allocatable() == {"mem": D(995)}


def test_a_subclass_overriding_allocate_and_free_is_always_called() -> None:
    # one-device maps install fast paths; they must not bypass a subclass's methods
    calls: list[str] = []

    class Audited(DiscretePropertyAllocMap):
        def allocate(self, slots, *, affinity_hint=None, context_tag=None):  # type: ignore[no-untyped-def]
            calls.append("allocate")
            return super().allocate(slots, affinity_hint=affinity_hint, context_tag=context_tag)

        def free(self, alloc):  # type: ignore[no-untyped-def]
            calls.append("free")
            super().free(alloc)

    m = Audited({DeviceId("root"): DeviceSlotInfo(SlotType.BYTES, SlotName("mem"), 1024)})
    for _ in range(3):
        m.free(m.allocate({SlotName("mem"): Decimal(512)}))
    assert calls == ["allocate", "free"] * 3
