"""Fraction alloc maps: exact grants, quantum checks, placement and the fragmentation guard."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelkit.allocmap import AllocationStrategy, FractionAllocMap
from accelkit.allocmap.placement import spread
from accelkit.errors import (
    FractionalResourceFragmented,
    InsufficientResource,
    InvalidResourceArgument,
    NotMultipleOfQuantum,
    ResourceError,
)
from accelkit.types import DeviceId, DeviceSlotInfo, SlotName, SlotType

D = Decimal
FILL, EVENLY = AllocationStrategy.FILL, AllocationStrategy.EVENLY
S = SlotName("cuda.shares")


def gpus(caps: list[str | int], slot: str = "cuda.shares") -> dict[DeviceId, DeviceSlotInfo]:
    return {
        DeviceId(f"cuda{i}"): DeviceSlotInfo(SlotType.COUNT, SlotName(slot), D(c))
        for i, c in enumerate(caps)
    }


def grant(m: FractionAllocMap, amount: str) -> dict[str, Decimal]:
    return {str(d): a for d, a in m.allocate({S: D(amount)})[S].items()}


def test_defaults() -> None:
    m = FractionAllocMap(gpus(["1.0"]))
    assert m.quantum_size == D("0.01")
    assert m.allow_fragmentation is True
    assert m.strategy is EVENLY


def test_grants_exactly_what_is_asked_never_rounding_down() -> None:
    # The reference rounds 1.75 at quantum 0.25 down to 1.5; the grants here sum exactly.
    m = FractionAllocMap(gpus(["1.0", "1.0"]), quantum_size=D("0.25"))
    g = grant(m, "1.75")
    assert sum(g.values()) == D("1.75")
    assert all(v % D("0.25") == 0 for v in g.values())


@pytest.mark.parametrize(
    ("quantum", "amount"), [("0.25", "0.3"), ("0.01", "0.005"), ("0.1", "1.05")]
)
def test_request_not_a_multiple_of_the_quantum_is_refused(quantum: str, amount: str) -> None:
    m = FractionAllocMap(gpus(["1.0", "1.0"]), quantum_size=D(quantum))
    with pytest.raises(NotMultipleOfQuantum, match="quantum"):
        m.allocate({S: D(amount)})
    assert m.allocatable() == {S: D(2)}


def test_not_multiple_of_quantum_is_a_resource_error_of_its_own() -> None:
    # DESIGN §5 lists it beside InvalidResourceArgument, not under it
    assert issubclass(NotMultipleOfQuantum, ResourceError)
    assert not issubclass(NotMultipleOfQuantum, InvalidResourceArgument)


def test_request_that_fits_on_one_device_goes_to_one_device() -> None:
    for strategy in (EVENLY, FILL):
        m = FractionAllocMap(gpus(["1.0", "1.0", "1.0"]), strategy=strategy)
        grant(m, "0.6")
        assert len(grant(m, "0.4")) == 1
        assert len(grant(m, "1")) == 1


def test_evenly_packs_small_requests_onto_the_best_fitting_device() -> None:
    m = FractionAllocMap(gpus(["1.0", "1.0"]))
    assert grant(m, "0.3") == {"cuda0": D("0.3")}
    assert grant(m, "0.5") == {"cuda0": D("0.5")}
    assert grant(m, "0.3") == {"cuda1": D("0.3")}
    assert grant(m, "0.2") == {"cuda0": D("0.2")}


def test_fill_puts_a_small_request_on_the_most_free_device() -> None:
    m = FractionAllocMap(gpus(["1.0", "1.0"]), strategy=FILL)
    assert grant(m, "0.3") == {"cuda0": D("0.3")}
    assert grant(m, "0.5") == {"cuda1": D("0.5")}
    assert grant(m, "0.6") == {"cuda0": D("0.6")}


def test_evenly_splits_evenly_over_as_few_devices_as_possible() -> None:
    m = FractionAllocMap(gpus(["1.0", "1.0"]))
    assert grant(m, "1.5") == {"cuda0": D("0.75"), "cuda1": D("0.75")}


def test_evenly_uses_whole_devices_when_that_is_even() -> None:
    m = FractionAllocMap(gpus(["1.0"] * 8))
    g = grant(m, "6")
    assert len(g) == 6
    assert set(g.values()) == {D(1)}


def test_evenly_takes_equal_shares_over_the_fewest_devices_that_allow_them() -> None:
    m = FractionAllocMap(gpus(["1.0"] * 8))
    g = grant(m, "3.3")  # 4 devices would be 0.82/0.83: 5 give 0.66 each
    assert sorted(g.values()) == [D("0.66")] * 5


def test_evenly_shares_differ_by_one_quantum_when_none_can_be_equal() -> None:
    m = FractionAllocMap(gpus(["1.0"] * 8))
    g = grant(m, "1.01")  # 101 quanta: equal shares would need 101 devices
    assert sorted(g.values()) == [D("0.50"), D("0.51")]


def test_evenly_splits_over_the_least_free_devices_that_hold_the_shares() -> None:
    m = FractionAllocMap(gpus(["1.0"] * 4))
    m.apply_allocation({S: {DeviceId("cuda2"): D("0.4"), DeviceId("cuda3"): D("0.4")}})
    # free 1.0/1.0/0.6/0.6: 1.2 goes to the two 0.6 devices, the whole ones stay whole
    assert grant(m, "1.2") == {"cuda2": D("0.60"), "cuda3": D("0.60")}
    assert grant(m, "2") == {"cuda0": D("1.00"), "cuda1": D("1.00")}


def test_evenly_never_splits_onto_devices_too_small_for_their_share() -> None:
    m = FractionAllocMap(gpus(["1.0"] * 4))
    m.apply_allocation({S: {DeviceId("cuda2"): D("0.5"), DeviceId("cuda3"): D("0.8")}})
    # free 1.0/1.0/0.5/0.2: 1.4 in two shares of 0.7 fits only the two whole devices
    assert grant(m, "1.4") == {"cuda0": D("0.70"), "cuda1": D("0.70")}


def test_evenly_falls_back_to_water_filling_when_no_split_is_even() -> None:
    m = FractionAllocMap(gpus(["1.0", "1.0"]))
    m.apply_allocation({S: {DeviceId("cuda1"): D("0.9")}})
    g = grant(m, "1.05")
    assert g == {"cuda0": D("0.95"), "cuda1": D("0.1")}


def test_fill_splits_from_the_most_free_device() -> None:
    m = FractionAllocMap(gpus(["1.0", "1.0", "1.0"]), strategy=FILL)
    m.apply_allocation({S: {DeviceId("cuda0"): D("0.5")}})
    assert grant(m, "1.5") == {"cuda1": D("1.00"), "cuda2": D("0.50")}


def test_grants_are_in_plain_fixed_point_form() -> None:
    m = FractionAllocMap(gpus(["1.0", "1.0"]))
    g = grant(m, "1.5")
    assert [str(v) for v in g.values()] == ["0.75", "0.75"]


def test_quantum_in_exponent_form_still_gives_plain_amounts() -> None:
    m = FractionAllocMap(gpus([1000, 1000]), quantum_size=D("1E+2"))
    g = grant(m, "1500")
    assert [str(v) for v in g.values()] == ["800", "700"]
    assert m.quantum_size == 100


@pytest.mark.parametrize("quantum", ["1E-30", "1E+30"])
def test_a_quantum_whose_grants_the_ledger_could_not_hold_is_refused(quantum: str) -> None:
    with pytest.raises(InvalidResourceArgument, match=r"quantum_size .* is out of range"):
        FractionAllocMap(gpus([1]), quantum_size=D(quantum))


def test_capacity_is_rounded_down_to_the_quantum() -> None:
    m = FractionAllocMap(gpus(["1.0", "0.55"]), quantum_size=D("0.25"))
    assert m.capacity() == {S: D("1.5")}
    with pytest.raises(InsufficientResource) as info:
        m.allocate({S: D("1.75")})
    assert info.value.allocatable == D("1.5")


@pytest.mark.parametrize("quantum", [D(0), D(-1), 0.5, "x"])
def test_bad_quantum_is_refused(quantum: object) -> None:
    with pytest.raises(InvalidResourceArgument):
        FractionAllocMap(gpus(["1"]), quantum_size=quantum)  # type: ignore[arg-type]


def test_insufficient_resource() -> None:
    m = FractionAllocMap(gpus(["1.0", "1.0"]))
    grant(m, "1.5")
    with pytest.raises(InsufficientResource) as info:
        m.allocate({S: D("0.6")})
    assert (info.value.slot, info.value.requested, info.value.allocatable) == (
        "cuda.shares",
        D("0.6"),
        D("0.5"),
    )


# -- fragmentation guard ------------------------------------------------------------------


def test_fragmented_request_is_refused_when_fragmentation_is_not_allowed() -> None:
    m = FractionAllocMap(gpus(["1.0", "1.0", "1.0"]), allow_fragmentation=False)
    m.apply_allocation({S: {DeviceId("cuda0"): D("0.5"), DeviceId("cuda1"): D("0.5")}})
    # 1.6 fits in the 2.0 free, but only on three devices, and ceil(1.6 / 1.0) = 2.
    with pytest.raises(FractionalResourceFragmented):
        m.allocate({S: D("1.6")})
    assert m.allocatable() == {S: D(2)}
    # 1.5 needs ceil(1.5) = 2 devices: cuda2 whole plus half of another is fine.
    assert sum(grant(m, "1.5").values()) == D("1.5")


def test_fragmentation_guard_uses_ceil_of_request_over_capacity() -> None:
    m = FractionAllocMap(gpus(["1.0", "1.0"]), allow_fragmentation=False)
    m.apply_allocation({S: {DeviceId("cuda0"): D("0.5"), DeviceId("cuda1"): D("0.2")}})
    with pytest.raises(FractionalResourceFragmented):
        m.allocate({S: D("0.9")})
    assert grant(m, "0.8") == {"cuda1": D("0.8")}


def test_fragmentation_allowed_splits_small_requests_when_it_must() -> None:
    m = FractionAllocMap(gpus(["1.0", "1.0"]))
    m.apply_allocation({S: {DeviceId("cuda0"): D("0.5"), DeviceId("cuda1"): D("0.5")}})
    assert grant(m, "0.8") == {"cuda0": D("0.40"), "cuda1": D("0.40")}


def test_evenly_prefers_an_uneven_split_within_the_device_limit() -> None:
    m = FractionAllocMap(gpus(["1.0", "1.0", "1.0"]), allow_fragmentation=False)
    m.apply_allocation({S: {DeviceId("cuda0"): D("0.9"), DeviceId("cuda2"): D("0.95")}})
    # 1.05 = ceil → 2 devices; no even 2-way split exists (cuda0 has 0.1 free), so the
    # grant is water-filled over the two most free devices.
    assert grant(m, "1.05") == {"cuda1": D("0.95"), "cuda0": D("0.10")}


def test_fill_fragmentation_guard() -> None:
    m = FractionAllocMap(gpus(["1.0", "1.0", "1.0"]), strategy=FILL, allow_fragmentation=False)
    m.apply_allocation({S: {DeviceId(f"cuda{i}"): D("0.6") for i in range(3)}})
    with pytest.raises(FractionalResourceFragmented):
        m.allocate({S: D("0.8")})
    assert grant(m, "0.4") == {"cuda0": D("0.4")}


# -- UNIQUE and single-device pools -----------------------------------------------------------


def test_unique_slot_in_a_fraction_map() -> None:
    devices = {
        **gpus(["1.0", "1.0"]),
        DeviceId("mig0"): DeviceSlotInfo(SlotType.UNIQUE, SlotName("cuda.mig-1g.10gb"), D(1)),
    }
    m = FractionAllocMap(devices, quantum_size=D("0.25"))
    mig = SlotName("cuda.mig-1g.10gb")
    a = m.allocate({mig: D(1), S: D("0.5")})
    assert a == {mig: {"mig0": D(1)}, S: {"cuda0": D("0.5")}}
    with pytest.raises(InvalidResourceArgument):
        m.allocate({mig: D("0.5")})
    with pytest.raises(InsufficientResource):
        m.allocate({mig: D(1)})
    m.free(a)
    assert m.allocatable() == {mig: D(1), S: D(2)}


def test_single_device_bytes_pool() -> None:
    devices = {DeviceId("root"): DeviceSlotInfo(SlotType.BYTES, SlotName("mem"), D(2**30))}
    m = FractionAllocMap(devices, strategy=FILL)
    a = m.allocate({SlotName("mem"): D(2**29)})
    assert a == {"mem": {"root": D(2**29)}}
    with pytest.raises(InsufficientResource):
        m.allocate({SlotName("mem"): D(2**29 + 1)})
    m.free(a)
    with pytest.raises(InvalidResourceArgument):
        m.free(a)
    assert m.allocatable() == {"mem": D(2**30)}


# -- apply and free ---------------------------------------------------------------------------


def test_free_and_apply_check_the_quantum() -> None:
    m = FractionAllocMap(gpus(["1.0"]), quantum_size=D("0.25"))
    # a restored or freed allocation off the quantum is malformed: InvalidResourceArgument
    with pytest.raises(InvalidResourceArgument, match="quantum"):
        m.apply_allocation({S: {DeviceId("cuda0"): D("0.3")}})
    m.apply_allocation({S: {DeviceId("cuda0"): D("0.75")}})
    with pytest.raises(InvalidResourceArgument, match="quantum"):
        m.free({S: {DeviceId("cuda0"): D("0.3")}})
    with pytest.raises(InvalidResourceArgument, match=r"only 0\.25 free"):
        m.apply_allocation({S: {DeviceId("cuda0"): D("0.5")}})
    m.free({S: {DeviceId("cuda0"): D("0.5")}})
    assert m.allocations == {S: {"cuda0": D("0.25")}}


def test_grants_round_trip_through_free() -> None:
    m = FractionAllocMap(gpus(["1.0"] * 4), quantum_size=D("0.05"))
    held = [m.allocate({S: D(x)}) for x in ("0.35", "1.5", "0.05", "1.1")]
    for a in held:
        m.free(a)
    assert all(v == 0 for v in m.allocations[S].values())


@pytest.mark.parametrize(
    ("amount", "error"),
    [("1E+3000000", InsufficientResource), ("1E-3000000", NotMultipleOfQuantum)],
)
def test_absurd_exponents_are_refused_without_exact_conversion(amount: str, error: type) -> None:
    # the exact ratio of these amounts has millions of digits; refusing must not build it
    m = FractionAllocMap(gpus(["1.0", "1.0"]), quantum_size=D("0.01"))
    with pytest.raises(error):
        m.allocate({S: D(amount)})
    assert m.allocatable() == {S: D(2)}


def test_an_absurd_unique_request_is_refused_without_converting_it() -> None:
    slots = {
        DeviceId("mig0"): DeviceSlotInfo(SlotType.UNIQUE, SlotName("cuda.mig-1g.10gb"), D(1)),
    }
    m = FractionAllocMap(slots, quantum_size=D("0.01"))
    with pytest.raises(InvalidResourceArgument, match="UNIQUE"):
        m.allocate({SlotName("cuda.mig-1g.10gb"): D("1E+999999")})
    assert m.allocate({SlotName("cuda.mig-1g.10gb"): D(1)}) == {"cuda.mig-1g.10gb": {"mig0": D(1)}}


def test_evenly_over_unequal_free_amounts_is_the_most_even_split() -> None:
    m = FractionAllocMap(gpus(["0.3", "0.3", "0.9"]))
    assert grant(m, "1") == {"cuda0": D("0.3"), "cuda1": D("0.3"), "cuda2": D("0.4")}
    # fewer devices when more of them would not be more even: 0.9/0.3/0.05, request 1
    m = FractionAllocMap(gpus(["0.9", "0.3", "0.05"]))
    assert grant(m, "1") == {"cuda0": D("0.7"), "cuda1": D("0.3")}


@given(
    caps=st.lists(st.integers(1, 60), min_size=2, max_size=7),
    used=st.lists(st.integers(0, 60), min_size=7, max_size=7),
    request=st.integers(1, 300),
)
def test_evenly_split_is_the_most_even_water_fill(
    caps: list[int], used: list[int], request: int
) -> None:
    quantum = D("0.01")
    m = FractionAllocMap(gpus([str(c * quantum) for c in caps]), quantum_size=quantum)
    frees = []
    for i, (c, u) in enumerate(zip(caps, used, strict=False)):
        take = min(c, u)
        if take:
            m.apply_allocation({S: {DeviceId(f"cuda{i}"): take * quantum}})
        frees.append(c - take)
    amount = request * quantum
    if request > sum(frees):
        with pytest.raises(InsufficientResource):
            m.allocate({S: amount})
        return
    granted = m.allocate({S: amount})[S]
    assert sum(granted.values()) == amount
    assert all(a > 0 and a % quantum == 0 for a in granted.values())
    shares = [int(a / quantum) for a in granted.values()]
    if max(frees) >= request:
        assert len(shares) == 1  # it fits on one device: one device
        return
    # No water-fill over the k most free devices, whatever k, is more even (shares one
    # quantum apart count as even).
    ordered = sorted(frees, reverse=True)
    gaps = [
        max(w) - min(w)
        for k in range(2, len(ordered) + 1)
        if sum(ordered[:k]) >= request
        for w in [spread(ordered[:k], request)]
    ]
    assert max(shares) - min(shares) <= max(1, min(gaps))
