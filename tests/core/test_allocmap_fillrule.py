"""FILL's one rule, written out for every layout, places as FILL is defined.

:mod:`accelkit.allocmap.fillrule` writes FILL's rule out once per layout of free amounts; the
differential tests compare the fast paths with the general placement, which comes from the
same rule. Here every layout is checked against FILL's definition itself, written the plain
way: devices ordered most free first (the first listed on a tie), each giving what it has
until one holds what is left.
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelkit.allocmap import fillrule
from accelkit.allocmap import shared as shared_module
from accelkit.allocmap.fillrule import fill
from accelkit.allocmap.pool import ScannedPool, SlotPool
from accelkit.allocmap.shared import AmountTable, SharedGrants
from accelkit.types import DeviceId, SlotName, SlotType


def by_definition(frees: list[int], mask: int, units: int) -> list[tuple[int, int]]:
    """FILL as its definition reads."""
    order = sorted((i for i, f in enumerate(frees) if f and mask >> i & 1), key=lambda i: -frees[i])
    out = []
    for i in order:
        n = min(frees[i], units)
        out.append((i, n))
        units -= n
        if not units:
            return out
    raise AssertionError


def pool_of(caps: list[int], frees: list[int], *, scanned: bool = False) -> SlotPool:
    cls = ScannedPool if scanned else SlotPool
    ids = [DeviceId(f"d{i}") for i in range(len(caps))]
    pool = cls(SlotName("s"), SlotType.COUNT, ids, caps, [0] * len(caps))
    pool.shift([(i, c - f) for i, (c, f) in enumerate(zip(caps, frees, strict=True))], 1)
    return pool


def amount(_pool: object, units: int) -> object:
    return units


def state(pool: SlotPool) -> tuple[list[int], dict[int, int], int]:
    return list(pool.free), dict(pool.buckets), pool.total_free


layouts = st.lists(st.tuples(st.integers(1, 6), st.integers(0, 6)), min_size=2, max_size=20).map(
    lambda pairs: ([c for c, _ in pairs], [min(c, f) for c, f in pairs])
)


@settings(max_examples=300, deadline=None)
@given(layout=layouts, mask_bits=st.integers(0, 2**20 - 1), share=st.integers(1, 100))
def test_the_general_placement_is_fill_by_definition(
    layout: tuple[list[int], list[int]], mask_bits: int, share: int
) -> None:
    caps, frees = layout
    for scanned in (False, True):
        pool = pool_of(caps, frees, scanned=scanned)
        mask = mask_bits & pool.all_mask or pool.all_mask
        have = sum(f for i, f in enumerate(frees) if mask >> i & 1)
        if not have:
            continue
        units = 1 + (share - 1) * have // 100
        before = state(pool)
        assert fill(pool, mask, units) == by_definition(frees, mask, units)
        assert state(pool) == before  # the general placement changes nothing


@settings(max_examples=300, deadline=None)
@given(layout=layouts, share=st.integers(1, 100))
def test_the_fast_paths_take_what_fill_places_by_definition(
    layout: tuple[list[int], list[int]], share: int
) -> None:
    caps, frees = layout
    if not sum(frees):
        return
    units = 1 + (share - 1) * sum(frees) // 100
    want = by_definition(frees, (1 << len(caps)) - 1, units)
    after = list(frees)
    for i, n in want:
        after[i] -= n
    expected = pool_of(caps, after)

    pool = pool_of(caps, frees)
    assert fillrule.taking_grants(pool)(units) == want
    assert state(pool) == state(expected)
    for scanned in (False, True):
        pool = pool_of(caps, frees, scanned=scanned)
        shared = SharedGrants(pool, amount)
        taking = fillrule.scanning_shared if scanned else fillrule.taking_shared
        got = taking(pool, shared, amount)(units)
        assert got == {"s": {f"d{i}": n for i, n in want}}
        assert state(pool) == state(expected)
        if len(want) > 1:  # a split is noted until it is freed
            if scanned:  # by device, with the units of the request
                assert shared.splits[id(got)] == (got, dict(want), units)
                assert not shared.live
            else:
                assert shared.live[id(got)] == (got, want)
                assert not shared.splits


@pytest.mark.parametrize("scanned", [False, True])
def test_a_pool_that_has_less_free_than_its_total_says_is_a_bug_caught(scanned: bool) -> None:
    pool = pool_of([2, 2], [1, 1], scanned=scanned)
    pool.total_free = 5  # a lie: the devices have 2
    taking = fillrule.scanning_shared if scanned else fillrule.taking_shared
    with pytest.raises(AssertionError, match="less free than the total said"):
        taking(pool, SharedGrants(pool, amount), amount)(3)
    pool = pool_of([2, 2], [1, 1], scanned=scanned)
    with pytest.raises(AssertionError, match="less free than the total said"):
        fill(pool, pool.all_mask, 3)  # a caller that did not check


def test_the_written_out_rule_can_be_read_where_it_runs() -> None:
    # tracebacks and inspect show the generated lines, as attrs does for its __init__
    text = inspect.getsource(fill)
    assert "the most free devices in turn give all they have" in text
    assert text in fillrule.source(fillrule.MASKED_BUCKETS, fillrule.GRANTS)


#: a fresh process: which of the rule's layouts are written out once the alloc maps are imported
#: and a discrete EVENLY map is built, then once a FILL placement is asked for
WRITTEN_ON_USE = """
import json
from decimal import Decimal
from accelkit.allocmap import AllocationStrategy, DiscretePropertyAllocMap, fillrule
from accelkit.types import DeviceId, DeviceSlotInfo, SlotName, SlotType
def written():
    return sorted(name for name in fillrule._WRITTEN_ON_USE if name in vars(fillrule))
slots = {DeviceId("d0"): DeviceSlotInfo(SlotType.COUNT, SlotName("x"), Decimal(2))}
DiscretePropertyAllocMap(slots, strategy=AllocationStrategy.EVENLY)
before = written()
fillrule.fill
print(json.dumps([before, written()]))
"""


def test_the_rule_is_written_out_for_a_layout_on_its_first_use_only() -> None:
    done = subprocess.run(
        [sys.executable, "-c", WRITTEN_ON_USE], capture_output=True, text=True, check=True
    )
    assert json.loads(done.stdout) == [[], ["fill"]]


def test_a_name_the_rule_does_not_write_out_is_no_attribute() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        fillrule.nothing  # noqa: B018 - the look-up is what is tested


@pytest.mark.parametrize("scale", [1, 1000])
def test_a_split_over_large_devices_takes_its_amounts_as_made(scale: int) -> None:
    # up to TABLE_LIMIT units a device, the amounts are a list made at once; beyond, a table
    # that makes them on first use: both give the grants FILL places
    caps = [3 * scale, 2 * scale, 4 * scale]
    pool = pool_of(caps, caps, scanned=True)
    made: list[int] = []

    def counting(_pool: object, units: int) -> object:
        made.append(units)
        return units

    shared = SharedGrants(pool, counting)
    got = fillrule.scanning_shared(pool, shared, counting)(7 * scale)
    assert got == {"s": {"d2": 4 * scale, "d0": 3 * scale}}
    table = fillrule.amount_table(pool, counting)
    if scale == 1:
        assert table == [0, 1, 2, 3, 4]
    else:  # only the amounts asked for were made
        assert isinstance(table, AmountTable)
        assert sorted(set(made)) == [3 * scale, 4 * scale]


def test_an_amount_table_keeps_at_most_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shared_module, "CACHE_LIMIT", 2)
    pool = pool_of([1000, 1000], [1000, 1000], scanned=True)
    table = AmountTable(pool, amount)
    assert [table[n] for n in (5, 6, 7, 5)] == [5, 6, 7, 5]
    assert dict(table) == {5: 5, 6: 6}  # 7 was made, not kept
