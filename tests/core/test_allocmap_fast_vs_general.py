"""The fast paths of ``allocate`` and ``free`` answer exactly as the general methods do.

Every alloc map gets closures that handle the common case in one frame
(:mod:`accelkit.allocmap.fastpath`, ``fillscan``, ``onedevice``); a map whose class overrides
``allocate`` or ``free`` keeps the general, validating methods only. Two maps built alike, one
of each kind, are given the same random calls, including refusals, hints, malformed amounts,
frees of copies, double frees and devices made unavailable: after every call both must have
answered alike (the same grant, or the same error with the same message) and hold the same
allocations.

FILL's fast paths run FILL's one rule written out for their layout
(:mod:`accelkit.allocmap.fillrule`); a layout written out to break ties otherwise must be
caught by the same comparison (``test_a_fast_path_that_breaks_fill_is_caught``).
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accelkit.allocmap import (
    AbstractAllocMap,
    AffinityHint,
    AffinityPolicy,
    AllocationStrategy,
    DiscretePropertyAllocMap,
    FractionAllocMap,
    fillrule,
)
from accelkit.errors import ResourceError
from accelkit.types import DeviceAllocation, DeviceId, DeviceSlotInfo, SlotName, SlotType

D = Decimal
FILL, EVENLY = AllocationStrategy.FILL, AllocationStrategy.EVENLY


class GeneralDiscrete(DiscretePropertyAllocMap):
    """A discrete map that keeps the general methods (overriding them installs no fast path)."""

    def allocate(self, slots: Any, **kwargs: Any) -> DeviceAllocation:
        return super().allocate(slots, **kwargs)

    def free(self, alloc: Any) -> None:
        super().free(alloc)


class GeneralFraction(FractionAllocMap):
    """A fraction map that keeps the general methods."""

    def allocate(self, slots: Any, **kwargs: Any) -> DeviceAllocation:
        return super().allocate(slots, **kwargs)

    def free(self, alloc: Any) -> None:
        super().free(alloc)


def devices(slot: str, caps: list[str], kind: SlotType = SlotType.COUNT) -> dict[DeviceId, Any]:
    return {
        DeviceId(f"{slot}{i}"): DeviceSlotInfo(kind, SlotName(slot), D(c), i % 2)
        for i, c in enumerate(caps)
    }


GPUS = devices("cuda", ["3", "3", "2", "3", "1"])
# more devices than a FILL map scans (pool.SCAN_LIMIT): it keeps buckets
MANY_GPUS = devices("cuda", ["3", "3", "2", "3", "1"] * 4)
SHARES = devices("shares", ["1.0", "1.0", "0.5", "1.0"])
ROOT = {DeviceId("root"): DeviceSlotInfo(SlotType.BYTES, SlotName("mem"), D(64))}

# name -> (the slot requests go to, a map with fast paths, the same map with general methods)
Maker = Callable[[type[Any]], AbstractAllocMap]
CONFIGS: dict[str, tuple[str, Maker, Maker]] = {
    # discrete FILL over a few devices: fillscan's closures; over many: fastpath's one-pool
    # closures with FILL written out for buckets
    "discrete-fill": ("cuda", lambda c: c(GPUS, strategy=FILL), lambda c: c(GPUS, strategy=FILL)),
    "discrete-fill-many": (
        "cuda",
        lambda c: c(MANY_GPUS, strategy=FILL),
        lambda c: c(MANY_GPUS, strategy=FILL),
    ),
    "discrete-evenly": (
        "cuda",
        lambda c: c(GPUS, strategy=EVENLY),
        lambda c: c(GPUS, strategy=EVENLY),
    ),
    # fraction FILL over a few devices: fillscan's closures; EVENLY: the one-pool closures
    "fraction-fill": (
        "shares",
        lambda c: c(SHARES, strategy=FILL, quantum_size=D("0.05")),
        lambda c: c(SHARES, strategy=FILL, quantum_size=D("0.05")),
    ),
    "fraction-evenly": (
        "shares",
        lambda c: c(SHARES, strategy=EVENLY, quantum_size=D("0.05")),
        lambda c: c(SHARES, strategy=EVENLY, quantum_size=D("0.05")),
    ),
    # one device: onedevice's closures
    "one-device": ("mem", lambda c: c(ROOT, strategy=FILL), lambda c: c(ROOT, strategy=FILL)),
    # two slots: fastpath's general closures
    "two-slots": (
        "cuda",
        lambda c: c(GPUS | ROOT, strategy=FILL),
        lambda c: c(GPUS | ROOT, strategy=FILL),
    ),
}
GENERAL = {
    "discrete-fill": GeneralDiscrete,
    "discrete-fill-many": GeneralDiscrete,
    "discrete-evenly": GeneralDiscrete,
    "fraction-fill": GeneralFraction,
    "fraction-evenly": GeneralFraction,
    "one-device": GeneralDiscrete,
    "two-slots": GeneralDiscrete,
}
FAST = {k: v.__mro__[1] for k, v in GENERAL.items()}

AMOUNTS = {
    "cuda": ["1", "2", "3", "4", "6", "9", "1.5", "0", "-1"],
    "shares": ["0.05", "0.25", "0.5", "1", "1.5", "2.25", "3.5", "0.33", "0", "-0.5"],
    "mem": ["1", "8", "16", "33", "64", "65", "2E+1", "0.5", "-4"],
}
# amounts that are not plain Decimals: each is judged by the general path of either map
ODD: list[Any] = [1.5, "1", 2, True, D("NaN"), D("1E+400"), "many"]
HINTS = [
    None,
    AffinityHint(AffinityPolicy.PREFER_SINGLE_NODE),
    AffinityHint(AffinityPolicy.INTERLEAVED, {1}),
]

# (sampled_from draws evenly; integers() leans on small values, which would seldom split)
step = st.one_of(
    st.tuples(
        st.just("allocate"),
        st.sampled_from(range(16)),
        st.sampled_from(range(len(HINTS))),
        st.booleans(),
    ),
    st.tuples(
        st.just("free"), st.sampled_from(range(30)), st.sampled_from(["held", "copy", "again"])
    ),
    st.tuples(st.just("fence"), st.sampled_from(range(32))),
)


def outcome(call: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[str, Any]:
    """What ``call(*args, **kwargs)`` answered: ``("ok", value)`` or ``("error", (type,
    message))``."""
    try:
        return ("ok", call(*args, **kwargs))
    except ResourceError as exc:
        return ("error", (type(exc).__name__, str(exc)))


def copy_of(grant: DeviceAllocation) -> dict[SlotName, dict[DeviceId, Decimal]]:
    return {slot: dict(per_device) for slot, per_device in grant.items()}


@pytest.mark.parametrize("config", list(CONFIGS))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(warm=st.booleans(), steps=st.lists(step, min_size=10, max_size=60))
def test_fast_and_general_paths_answer_alike(
    config: str, warm: bool, steps: list[tuple[Any, ...]]
) -> None:
    answer_alike(config, warm, steps)


def answer_alike(config: str, warm: bool, steps: list[tuple[Any, ...]]) -> None:
    """Give both maps of ``config`` the same ``steps``; assert they answered alike."""
    slot, make_fast, make_general = CONFIGS[config]
    fast, general = make_fast(FAST[config]), make_general(GENERAL[config])
    assert "allocate" in vars(fast)  # the fast closures are installed on one map only
    assert "allocate" not in vars(general)
    if warm:  # every amount seen once: the fast paths take (and note) them from the start
        for amount in AMOUNTS[slot]:
            for m in (fast, general):
                kind, grant = outcome(m.allocate, {SlotName(slot): D(amount)})
                if kind == "ok":
                    m.free(grant)
    ids = sorted({d for d, info in fast._all_slots.items() if info.slot_name == slot})
    held: list[tuple[DeviceAllocation, DeviceAllocation]] = []
    freed: list[tuple[DeviceAllocation, DeviceAllocation]] = []
    for op, *args in steps:
        if op == "allocate":
            k, h, tagged = args
            amounts = [D(a) for a in AMOUNTS[slot]] + ODD
            request = {SlotName(slot): amounts[k % len(amounts)]}
            kwargs = {"affinity_hint": HINTS[h], "context_tag": "agent-1" if tagged else None}
            got = outcome(fast.allocate, dict(request), **kwargs)
            want = outcome(general.allocate, dict(request), **kwargs)
            assert got == want, (request, kwargs)
            if got[0] == "ok":
                held.append((got[1], want[1]))
        elif op == "free" and (held or freed):
            j, how = args
            pool = freed if how == "again" or not held else held
            if not pool:
                continue
            pair = pool[j % len(pool)]
            if how == "copy":
                a, b = copy_of(pair[0]), copy_of(pair[1])
            else:
                a, b = pair
            got = outcome(fast.free, a)
            want = outcome(general.free, b)
            assert got == want, (a, how)
            if got[0] == "ok" and pool is held:
                held.remove(pair)
                freed.append(pair)
        elif op == "fence":
            (bits,) = args
            chosen = frozenset(d for i, d in enumerate(ids) if bits >> i & 1)
            fast.set_unavailable(chosen)
            general.set_unavailable(chosen)
        assert fast.allocations == general.allocations
        assert fast.allocatable() == general.allocatable()


# FILL's rule written out with the last device on a tie instead of the first (fillrule's
# stores): a fast path built from it must be caught disagreeing with the general placement
LAST_IN_BUCKET = {
    "first": "rest = buckets[most]\nbit = 1 << rest.bit_length() - 1\n"
    "rest ^= bit\ni = bit.bit_length() - 1"
}
LAST_ON_A_TIE = {
    "_SCANNED_SHARED": (
        fillrule.FREE_LIST,
        fillrule.SHARED,
        {"first": "i = len(free) - 1 - free[::-1].index(most)"},
    ),
    "_POOL_SHARED": (fillrule.POOL_BUCKETS, fillrule.SHARED, LAST_IN_BUCKET),
    "_POOL_GRANTS": (fillrule.POOL_BUCKETS, fillrule.GRANTS, LAST_IN_BUCKET),
}


@pytest.mark.parametrize(
    ("config", "factory"),
    [
        ("fraction-fill", "_SCANNED_SHARED"),
        ("discrete-fill", "_SCANNED_SHARED"),
        ("discrete-fill-many", "_POOL_SHARED"),
        ("two-slots", "_POOL_GRANTS"),
    ],
)
def test_a_fast_path_that_breaks_fill_is_caught(
    config: str, factory: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, result, change = LAST_ON_A_TIE[factory]
    # a request of one GPU (or 0.05 share) once every amount was seen: several devices tie
    # for the most free, and the fast path places it
    steps: list[tuple[Any, ...]] = [("allocate", 0, 0, False)]
    answer_alike(config, True, steps)  # the rule as written: alike
    mutant = fillrule.build(attrs.evolve(store, **change), result, "last on a tie")
    monkeypatch.setattr(fillrule, factory, mutant)
    with pytest.raises(AssertionError):
        answer_alike(config, True, steps)
