"""FILL, written once: the most free device, else the most free devices in turn.

FILL gives a request to the device with the most free units, the first listed on a tie; when
none holds it, the most free device gives all it has, then the most free of the rest, and so
on until one holds what is left. :data:`RULE` is the only place that rule is written.

The maps keep free amounts in two layouts (:mod:`accelkit.allocmap.pool`): free-amount
buckets, or only the list of free amounts for a few devices; the general placement works out
grants without changing anything, while the fast paths take them at once and hand out their
own grants. A :class:`Store` says how one layout finds the most free device and takes units
from it, a :class:`Result` what a caller gets back, and :func:`build` writes the rule out for
one pair of them once, on the pair's first use, as attrs writes a class's ``__init__`` from
its fields: the fast paths then run the rule in one frame, with no call per device, and a
command that places nothing compiles nothing. The differential
tests (``tests/core/test_allocmap_fast_vs_general.py``) check every fast path's pair against
the general placement's.
"""

from __future__ import annotations

import linecache
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any, cast

import attrs

from accelkit.allocmap import namespaced
from accelkit.allocmap.pool import CACHE_LIMIT, ScannedPool, SlotPool
from accelkit.allocmap.shared import AmountTable, SharedGrants
from accelkit.reprs import attrs_eq, attrs_hash, attrs_repr
from accelkit.types import DeviceAllocation

Amount = Callable[[Any, int], Decimal]

#: FILL's rule. Each ``{hole}`` is filled from a :class:`Store` or a :class:`Result`.
RULE = """\
def fill({params}):
    {prepare}
    most = {most}
    if most >= units:  # the most free device holds the request
        n = units
        {first}
        {give}
        {one}
    # none does: the most free devices in turn give all they have, until one holds the rest
    {start}
    {walk}
    while most:
        {pick}
        if most >= units:  # this one holds the rest
            n = units
            {give}
            {note}
            {several}
        n = most
        {give_all}
        {note}
        units -= most
        {after}
    raise AssertionError(SHORT)
"""

#: why the rule stops when the devices give out first: its callers check the free total
SHORT = "the devices had less free than the total said"


@attrs.frozen(repr=False)
class Store:
    """How one layout of free amounts finds the most free devices and takes units from them.

    ``cells`` binds, from ``pool``, names the other snippets use; ``params`` are the generated
    function's parameters (``units`` among them); ``prepare`` runs once per call. ``most`` is
    the largest free amount (the caller checked that there is some, so ``max`` needs no
    default, which would double its cost) and ``first`` sets ``i`` to the first device listed
    with that much free. A split readies its walk with ``walk``; then ``pick`` sets ``i`` to
    the next device in the order, ``give_all`` takes all of its ``most`` and ``after`` sets
    ``most`` to what the next device has free (0 when none has any). ``give`` takes ``n`` of
    device ``i``'s ``most`` and ends the request.
    """

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    params: str
    cells: str
    prepare: str
    most: str
    first: str
    give: str
    walk: str
    pick: str
    give_all: str
    after: str


@attrs.frozen(repr=False)
class Result:
    """What the caller of a generated function gets back: ``one`` and ``several`` are
    statements that return it; ``start`` and ``note`` collect the devices of a split."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    cells: str
    start: str
    note: str
    one: str
    several: str


# Buckets map a free amount to a bitmask of the devices with that much free; ``rest`` holds
# the devices of the bucket being walked that are still to give.
_FIRST_IN_BUCKET = "rest = buckets[most]\nbit = rest & -rest\nrest ^= bit\ni = bit.bit_length() - 1"
_NEXT_IN_BUCKET = "bit = rest & -rest\nrest ^= bit\ni = bit.bit_length() - 1"
_NEXT_BUCKET = """\
if not rest:
    del buckets[most]
    most = max(buckets) if buckets else 0
    if most:
        rest = buckets[most]"""

#: free-amount buckets of the devices in ``mask``, copied: the general placement, which
#: changes nothing
MASKED_BUCKETS = Store(
    params="pool, mask, units",
    cells="",
    prepare="buckets = {v: bits & mask for v, bits in pool.buckets.items() if bits & mask}",
    most="max(buckets)",
    first=_FIRST_IN_BUCKET,
    give="",
    walk="rest = buckets[most]",
    pick=_NEXT_IN_BUCKET,
    give_all="",
    after=_NEXT_BUCKET,
)

#: the pool's own buckets and free amounts, changed as units are taken (fast paths of maps
#: over many devices); a bucket walked through is written back once
POOL_BUCKETS = Store(
    params="units",
    cells="buckets, free = pool.buckets, pool.free",
    prepare="pool.total_free -= units",
    most="max(buckets)",
    first=_FIRST_IN_BUCKET,
    give="""\
free[i] = left = most - n
if rest:
    buckets[most] = rest
else:
    del buckets[most]
if left:
    buckets[left] = buckets.get(left, 0) | bit""",
    walk="rest = buckets[most]",
    pick=_NEXT_IN_BUCKET,
    give_all="free[i] = 0",
    after=_NEXT_BUCKET,
)

#: the list of free amounts of a :class:`~accelkit.allocmap.pool.ScannedPool` (no buckets),
#: changed as units are taken: over a few devices one sort and ``list.index`` cost less than
#: keeping buckets (a device that gave all it had drops to 0, so ``index`` finds the next)
FREE_LIST = Store(
    params="units",
    cells="free = pool.free\nwhere = free.index",
    prepare="pool.total_free -= units\norder = sorted(free)",
    most="order.pop()",
    first="i = where(most)",
    give="free[i] = most - n",
    walk="",
    pick="i = where(most)",
    give_all="free[i] = 0",
    after="most = order.pop() if order else 0",
)


#: ``[(device index, units), ...]``, as :mod:`accelkit.allocmap.placement` places
GRANTS = Result(
    cells="",
    start="out = []",
    note="out.append((i, n))",
    one="return [(i, n)]",
    several="return out",
)

#: the grants of :class:`~accelkit.allocmap.shared.SharedGrants` (``shared``): one read-only
#: grant per device and amount, and each split noted until it is freed
SHARED = Result(
    cells=(
        "slot, ids, amount_of = pool.name, pool.ids, pool.amount_of\n"
        "by_device, make, live = shared.by_device, shared.make, shared.live"
    ),
    start="out = {}\ntaken = []",
    note="out[ids[i]] = amount_of.get(n) or amount(pool, n)\ntaken.append((i, n))",
    one="return by_device[i].get(n) or make(i, n)",
    several=(
        "result = {slot: out}\n"
        "if len(live) < CACHE_LIMIT:\n    live[id(result)] = (result, taken)\n"
        "return result"
    ),
)

#: :data:`SHARED` for the FILL maps of a few devices (:mod:`accelkit.allocmap.fillscan`): a
#: split is noted in ``shared.splits`` as ``{device index: units}`` with the units of the whole
#: request (a free then adds each device's units and the total once), its amounts come from
#: :func:`amount_table`, and a one-device grant already made is one lookup. On the W3 FILL
#: trace splits are two in five grants and most of the work.
SHARED_SPLITS = Result(
    cells=(
        "slot, ids, amounts = pool.name, pool.ids, amount_table(pool, amount)\n"
        "by_device, make, splits = shared.by_device, shared.make, shared.splits"
    ),
    start="out = {}\ntaken = {}\nasked = units",
    note="out[ids[i]] = amounts[n]\ntaken[i] = n",
    one=(
        "try:\n    return by_device[i][n]\n"
        "except KeyError:  # the first grant of n on device i\n    return make(i, n)"
    ),
    several=(
        "result = {slot: out}\n"
        "if len(splits) < CACHE_LIMIT:\n    splits[id(result)] = (result, taken, asked)\n"
        "return result"
    ),
)


#: pools of at most this many units per device get their amounts as a list made up front
TABLE_LIMIT = 256


def amount_table(pool: SlotPool, amount: Amount) -> Sequence[Decimal] | AmountTable:
    """The amount of every count of units a device of ``pool`` can have: a list made at once
    for a pool of small devices (W3's shares: 101 amounts), else an
    :class:`~accelkit.allocmap.shared.AmountTable` that makes them on first use. Indexing the
    list costs a third of what ``amount_of.get(n) or amount(pool, n)`` does."""
    if pool.max_cap <= TABLE_LIMIT:
        return [amount(pool, units) for units in range(pool.max_cap + 1)]
    return AmountTable(pool, amount)


def source(store: Store, result: Result) -> str:
    """The source of ``bind(pool, shared, amount)``, which returns the names the ``cells`` of
    ``store`` and ``result`` bind, and of :data:`RULE` written out as ``fill``, which reads
    them as globals (see :func:`build`)."""
    holes = attrs.asdict(store) | attrs.asdict(result)
    lines = ["def bind(pool, shared, amount):"]
    lines += [f"    {line}" for line in f"{store.cells}\n{result.cells}".splitlines() if line]
    lines += ["    return locals()", "", ""]
    for line in RULE.splitlines():
        body = line.lstrip()
        indent = " " * (len(line) - len(body))
        if body[:1] == "{" and body[-1:] == "}":  # a hole on a line of its own: a block
            lines += [indent + part for part in holes[body[1:-1]].splitlines()]
        else:
            lines.append(indent + body.format_map(holes))
    return "\n".join(lines) + "\n"


def build(store: Store, result: Result, name: str) -> Callable[..., Any]:
    """Compile :func:`source` once; tracebacks show its lines under ``<fill name>``.

    Returns a factory ``(pool, shared, amount) -> fill``: each ``fill`` is a copy of the
    written-out rule whose globals are the names ``bind`` gives it for that pool
    (:mod:`accelkit.allocmap.namespaced`), which cost a call nothing where closure cells are
    copied into every frame.
    """
    text = source(store, result)
    filename = f"<fill {name}>"
    # our own constant text, never input: generated as attrs generates __init__
    code = compile(text, filename, "exec")
    space: dict[str, Any] = {
        "amount_table": amount_table,
        "CACHE_LIMIT": CACHE_LIMIT,
        "SHORT": SHORT,
    }
    exec(code, space)  # noqa: S102 - see above
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    bind = space["bind"]
    space.update(dict.fromkeys(bind.__code__.co_varnames))  # the names bind gives each copy

    def factory(pool: Any, shared: Any, amount: Any) -> Callable[..., Any]:
        return cast(
            "Callable[..., Any]",
            namespaced.copies(space, ("fill",), bind(pool, shared, amount))["fill"],
        )

    return factory


Grants = list[tuple[int, int]]

#: ``fill(pool, mask, units)``: FILL's grants of ``units`` over the devices of ``pool`` in
#: ``mask``, changing nothing (the caller checked that they have ``units`` free); written out
#: on first use, as are the factories below (see :func:`__getattr__`)
fill: Callable[[SlotPool, int, int], Grants]

#: the module attributes written out on first use: their store, result and name
_WRITTEN_ON_USE: dict[str, tuple[Store, Result, str]] = {
    "fill": (MASKED_BUCKETS, GRANTS, "placement"),
    "_POOL_GRANTS": (POOL_BUCKETS, GRANTS, "pool grants"),
    "_POOL_SHARED": (POOL_BUCKETS, SHARED, "pool shared grants"),
    "_SCANNED_SHARED": (FREE_LIST, SHARED_SPLITS, "scanned shared grants"),
}


def __getattr__(name: str) -> Any:
    """Build one of :data:`_WRITTEN_ON_USE` the first time it is asked for, then keep it as a
    module attribute (so later look-ups, and a test's replacement, never come here)."""
    if (made := _WRITTEN_ON_USE.get(name)) is None:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    factory = build(*made)
    value = factory(None, None, None) if name == "fill" else factory
    globals()[name] = value
    return value


def _factory(name: str) -> Callable[..., Any]:
    """The factory ``name`` of :data:`_WRITTEN_ON_USE`, built if not yet."""
    found = globals().get(name)
    return cast("Callable[..., Any]", found if found is not None else __getattr__(name))


def taking_grants(pool: SlotPool) -> Callable[[int], Grants]:
    """FILL that takes ``units`` from ``pool``'s buckets at once and returns the grants (the
    caller holds the map's lock and checked that the pool has them free)."""
    return cast("Callable[[int], Grants]", _factory("_POOL_GRANTS")(pool, None, None))


def taking_shared(
    pool: SlotPool, shared: SharedGrants, amount: Amount
) -> Callable[[int], DeviceAllocation]:
    """:func:`taking_grants` handing out ``shared``'s grants (splits noted until freed)."""
    return cast("Callable[[int], DeviceAllocation]", _factory("_POOL_SHARED")(pool, shared, amount))


def scanning_shared(
    pool: ScannedPool, shared: SharedGrants, amount: Amount
) -> Callable[[int], DeviceAllocation]:
    """:func:`taking_shared` for a :class:`~accelkit.allocmap.pool.ScannedPool` (no buckets),
    noting splits in ``shared.splits`` (:data:`SHARED_SPLITS`)."""
    return cast(
        "Callable[[int], DeviceAllocation]", _factory("_SCANNED_SHARED")(pool, shared, amount)
    )
