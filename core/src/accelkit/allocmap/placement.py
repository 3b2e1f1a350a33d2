"""Placement algorithms: which devices give how many units to one slot's request.

Every function here is pure: it reads a :class:`~accelkit.allocmap.pool.SlotPool` and returns
``[(device index, units), ...]`` without changing anything, so a map can compute the grants of
every slot of a request before it commits any of them (atomicity). Callers guarantee that the
devices in ``mask`` have at least ``amount`` units free in total.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from accelkit.allocmap import fillrule
from accelkit.allocmap.affinity import AffinityHint, AffinityPolicy
from accelkit.allocmap.pool import Node, SlotPool, iter_bits
from accelkit.errors import InvalidResourceArgument

Grants = list[tuple[int, int]]
PlaceIn = Callable[[SlotPool, int, int], Grants]


def check_unique(pool: SlotPool, units: int, requested: object) -> None:
    """A UNIQUE slot hands out one whole device per request: the request must be 1."""
    if units != 1:
        msg = f"UNIQUE slot {pool.name!r}: request exactly 1, not {requested}"
        raise InvalidResourceArgument(msg)


def spread(frees: Sequence[int], amount: int) -> list[int]:
    """Water-fill ``amount`` over bins with ``frees`` capacity, as evenly as they allow.

    Bins too small for an even share are filled up; the others get the same share, and the
    units left over from dividing go one each to the bins with the most free capacity
    (the earlier bin on a tie).
    """
    n = len(frees)
    out = [0] * n
    order = sorted(range(n), key=frees.__getitem__)
    pos = 0
    while pos < n:
        i = order[pos]
        v = frees[i]
        if v * (n - pos) > amount:
            break
        out[i] = v
        amount -= v
        pos += 1
    if pos < n:
        level, extra = divmod(amount, n - pos)
        for i in sorted(order[pos:], key=lambda j: (-frees[j], j)):
            out[i] = level + 1 if extra else level
            extra -= extra > 0
    return out


def evenly(pool: SlotPool, mask: int, amount: int) -> Grants:
    """Spread over every device in ``mask`` as evenly as the free amounts allow.

    Same rule as :func:`spread`, worked on the free-amount buckets so the cost grows with the
    number of devices granted, not with the number of devices in the pool.
    """
    groups = pool.groups(mask)
    left = sum(bits.bit_count() for _, bits in groups)
    out: Grants = []
    pos = 0
    for v, bits in groups:
        count = bits.bit_count()
        if v * left > amount:
            break
        # Every device of this group is smaller than the even share: it gives all it has.
        out.extend((i, v) for i in iter_bits(bits))
        amount -= v * count
        left -= count
        pos += 1
    if not amount:
        return out
    level, extra = divmod(amount, left)
    for _v, bits in reversed(groups[pos:]):
        rest = bits
        while rest:
            low = rest & -rest
            rest ^= low
            if extra:
                out.append((low.bit_length() - 1, level + 1))
                extra -= 1
            elif level:
                out.append((low.bit_length() - 1, level))
            else:
                return out
    return out


def fraction_fill(pool: SlotPool, mask: int, amount: int, limit: int | None) -> Grants | None:
    """FILL for fraction maps; ``None`` when it needs more than ``limit`` devices.

    Taking from the most free devices first uses the fewest devices, so when this needs more
    than ``limit`` no other placement fits in ``limit`` either.
    """
    out = fillrule.fill(pool, mask, amount)
    return None if limit is not None and len(out) > limit else out


#: once shares one quantum apart fit on ``k`` devices, equal shares are looked for over at
#: most this many more devices: the walk stays short however many devices the pool has, and
#: pools of up to this many devices more than ``k`` (W3's eight) see every count
EQUAL_REACH = 8


def fraction_evenly(pool: SlotPool, mask: int, amount: int, limit: int | None) -> Grants | None:
    """EVENLY for fraction maps; ``None`` when it needs more than ``limit`` devices.

    A request that fits on one device goes to the device it fits best (least free), which
    keeps whole devices free for large requests. A larger one gets the most even split the
    free amounts allow: equal shares over the fewest devices that allow them, else shares one
    quantum apart over the fewest devices that allow those (1.5 over 2 x 1.0 free -> 0.75 +
    0.75; 0.99 over 3 x 0.5 free -> 0.33 x 3 rather than 0.5 + 0.49), taken from the least free
    devices that still hold their shares, so the most free stay whole for later requests.
    Equal shares are looked for up to :data:`EQUAL_REACH` devices past the first count whose
    shares can be one quantum apart. When no number of devices allows such shares it is
    water-filled over the ``k`` most free devices that give the most even split (the smallest
    gap between shares; fewest devices on a tie): 0.3/0.3/0.9, request 1 -> 0.3 + 0.3 + 0.4
    rather than 0.3 + 0.7.

    The cost does not grow with the pool: the devices are walked most free first from the
    free-amount buckets only as far as the count of devices chosen (at most ``amount``), and
    the least free window that holds the shares is found by counting devices per bucket.

    Over 30 seeds of the W3 trace this makes fewer uneven grants, fewer multi-device grants and
    fewer splits of requests that would fit one device than Backend.AI's EVENLY on the same
    traces (``tests/benchmarks/README.md``).
    """
    fit = best_fit(pool, mask, amount)
    if fit >= 0:
        return [(fit, amount)]
    if len(pool.ids) <= SMALL_POOL:
        return _evenly_over_a_few(pool, mask, amount, limit)
    groups = pool.groups(mask)  # least free first
    # the devices walked so far, most free first (the first device on a tie), as (free, index)
    top: list[tuple[int, int]] = []
    last = len(pool.ids) if limit is None else limit  # a request may use ``limit`` devices
    total = 0
    fallback = 0  # the fewest devices that hold the request at all
    near = 0  # the fewest devices whose shares can be one quantum apart
    k = 0
    for v, group in reversed(groups):
        todo = group
        while todo:
            bit = todo & -todo
            todo ^= bit
            top.append((v, bit.bit_length() - 1))
            k += 1
            total += v
            if not fallback and total >= amount:
                fallback = k
            if k > 1:
                low, rest = divmod(amount, k)
                # the k-th device must hold the small share, the rest-th (the last of those
                # taking one quantum more) the large one; at k == amount (shares of one unit)
                # the k-th always does, so the walk never passes ``amount``
                if v >= low and not (rest and top[rest - 1][0] <= low):
                    if not rest:
                        return _least_free_window(groups, k, low, 0)
                    near = near or k
            if k >= last or (near and k >= near + EQUAL_REACH):
                break
        else:
            continue
        break
    if near:
        return _least_free_window(groups, near, *divmod(amount, near))
    if not fallback:
        return None
    return _most_even_fill(top, amount, fallback)


#: pools of up to this many devices split by walking one list of them all, most free first:
#: the same answers, 5-8% cheaper on W3's eight devices than the walk over the buckets
SMALL_POOL = 16


def _evenly_over_a_few(pool: SlotPool, mask: int, amount: int, limit: int | None) -> Grants | None:
    """:func:`fraction_evenly`'s split over a list of every device (a few of them)."""
    ordered: list[tuple[int, int]] = []  # most free first (the first device on a tie)
    for v, group in reversed(pool.groups(mask)):
        todo = group
        while todo:
            bit = todo & -todo
            todo ^= bit
            ordered.append((v, bit.bit_length() - 1))
    within = ordered if limit is None else ordered[:limit]
    total = fallback = near = 0
    stop = 0  # the last count looked at once ``near`` is known
    for k, (v, _) in enumerate(within, 1):
        total += v
        if not fallback and total >= amount:
            fallback = k
        if k > 1:
            low, rest = divmod(amount, k)
            if v >= low and not (rest and ordered[rest - 1][0] <= low):
                if not rest:
                    return _window_in_list(ordered, k, low, 0)
                if not near:
                    near, stop = k, k + EQUAL_REACH
        if k == stop:
            break
    if near:
        return _window_in_list(ordered, near, *divmod(amount, near))
    if not fallback:
        return None
    return _most_even_fill(within, amount, fallback)


def _window_in_list(ordered: list[tuple[int, int]], k: int, low: int, rest: int) -> Grants:
    """:func:`_least_free_window` over a list of every device, most free first."""
    start = 0
    for s in range(1, len(ordered) - k + 1):
        if ordered[s + k - 1][0] < low or (rest and ordered[s + rest - 1][0] <= low):
            break  # frees only shrink further down: no later run holds the shares either
        start = s
    return [(ordered[start + j][1], low + 1 if j < rest else low) for j in range(k)]


def _most_even_fill(ordered: list[tuple[int, int]], amount: int, fewest: int) -> Grants:
    """``amount`` water-filled over the ``k`` most free devices of ``ordered`` (``fewest`` at
    least) whose shares are closest to each other; fewest devices on a tie."""
    frees = [v for v, _ in ordered]
    best_k, best_gap = fewest, _gap(frees, fewest, amount)
    for k in range(fewest + 1, len(frees) + 1):
        if best_gap <= 1:
            break
        if (gap := _gap(frees, k, amount)) < best_gap:
            best_k, best_gap = k, gap
    shares = spread(frees[:best_k], amount)
    return [(ordered[j][1], share) for j, share in enumerate(shares)]


def _least_free_window(groups: list[tuple[int, int]], k: int, low: int, rest: int) -> Grants:
    """``rest`` shares of ``low + 1`` and ``k - rest`` of ``low`` on ``k`` devices next to each
    other in most-free-first order: the least free such run whose devices hold their shares
    (the most free run does).

    ``groups`` is ``(free, bitmask)`` least free first. A run starting at position ``s`` holds
    the shares while its last device has ``low`` free and its ``rest``-th more than ``low``, so
    the last start is found by counting those devices per bucket, not by walking them.
    """
    at_least = above = 0  # devices with at least ``low`` free, and with more
    for v, bits in groups:
        if v >= low:
            count = bits.bit_count()
            at_least += count
            if v > low:
                above += count
    start = at_least - k
    if rest and above - rest < start:
        start = above - rest
    run: list[int] = []
    pos = 0  # the position of the bucket's first device, most free first
    for _v, bits in reversed(groups):
        count = bits.bit_count()
        if pos + count > start:
            run += _ranks(bits, max(start - pos, 0), min(start + k - pos, count), count)
            if len(run) == k:
                break
        pos += count
    return [(i, low + 1 if j < rest else low) for j, i in enumerate(run)]


def _ranks(bits: int, first: int, end: int, count: int) -> list[int]:
    """The indices of the set bits of ``bits`` (``count`` of them) from the ``first``-th to
    before the ``end``-th, lowest first; walked from whichever end of ``bits`` is nearer."""
    if count - end < first:
        for _ in range(count - end):  # drop the highest bits past ``end``
            bits ^= 1 << (bits.bit_length() - 1)
        out = []
        for _ in range(end - first):
            high = bits.bit_length() - 1
            out.append(high)
            bits ^= 1 << high
        out.reverse()
        return out
    for _ in range(first):  # drop the lowest bits before ``first``
        bits &= bits - 1
    out = []
    for _ in range(end - first):
        low = bits & -bits
        out.append(low.bit_length() - 1)
        bits ^= low
    return out


def _gap(frees: list[int], k: int, amount: int) -> int:
    """The gap between the largest and smallest share when ``amount`` is water-filled over
    the first ``k`` of ``frees`` (sorted most free first)."""
    rem, cnt, j = amount, k, k - 1
    while cnt > 1 and frees[j] * cnt < rem:  # too small for an even share: it gives all
        rem -= frees[j]
        cnt -= 1
        j -= 1
    level, extra = divmod(rem, cnt)
    smallest = frees[k - 1] if j < k - 1 else level
    return level + (1 if extra else 0) - smallest


def best_fit(pool: SlotPool, mask: int, amount: int) -> int:
    """The first device in ``mask`` with the least free room that still holds ``amount``;
    -1 when none does."""
    best = 0
    if mask == pool.all_mask:
        # Every bucket holds at least one device: no need to intersect with the mask.
        for v in pool.buckets:
            if amount <= v and (not best or v < best):
                best = v
    else:
        for v, bits in pool.buckets.items():
            if amount <= v and (not best or v < best) and bits & mask:
                best = v
    if not best:
        return -1
    bits = pool.buckets[best] & mask
    return (bits & -bits).bit_length() - 1


def place(
    pool: SlotPool, amount: int, hint: AffinityHint | None, place_in: PlaceIn, single_fit: bool
) -> Grants:
    """Lay ``amount`` out over NUMA nodes as ``hint`` asks, then over devices with ``place_in``.

    ``single_fit`` says a request that fits on one device must stay on one device (fraction
    maps); node policies then only shape requests that have to be split anyway.
    """
    if hint is None:
        return place_in(pool, pool.all_mask, amount)

    def on(nodes: Sequence[Node], share: int) -> Grants:
        return _on_nodes(
            pool, nodes, share, policy=hint.policy, place_in=place_in, single_fit=single_fit
        )

    if not hint.numa_nodes:
        return on(pool.nodes, amount)
    wanted = hint.numa_nodes
    first = [n for n in pool.nodes if n in wanted]
    first_mask = _mask_of(pool, first)
    if single_fit:
        # Staying on one device outranks the node preference: a device on the hinted nodes
        # if one can hold the request, else any device that can.
        for mask in (first_mask, pool.all_mask):
            if pool.most_free(mask) >= amount:
                return place_in(pool, mask, amount)
    have = pool.free_in(first_mask)
    if have >= amount:
        return on(first, amount)
    # The hinted nodes give all they have; the rest spills over to the other nodes.
    rest = [n for n in pool.nodes if n not in wanted]
    return (on(first, have) if have else []) + on(rest, amount - have)


def _on_nodes(
    pool: SlotPool,
    nodes: Sequence[Node],
    amount: int,
    *,
    policy: AffinityPolicy,
    place_in: PlaceIn,
    single_fit: bool,
) -> Grants:
    node_mask = pool.node_mask
    if len(nodes) == 1:
        return place_in(pool, node_mask[nodes[0]], amount)
    mask = _mask_of(pool, nodes)
    if single_fit and pool.most_free(mask) >= amount:
        return place_in(pool, mask, amount)
    frees = [pool.free_in(node_mask[n]) for n in nodes]
    if policy is AffinityPolicy.PREFER_SINGLE_NODE:
        # Best fit: the node with the least free capacity that still holds the request keeps
        # the roomier nodes whole for the requests that need them.
        best = -1
        for j, f in enumerate(frees):
            if f >= amount and (best < 0 or f < frees[best]):
                best = j
        if best >= 0:
            return place_in(pool, node_mask[nodes[best]], amount)
        shares = [0] * len(nodes)
        left = amount
        for j in sorted(range(len(nodes)), key=lambda j: -frees[j]):
            shares[j] = min(frees[j], left)
            left -= shares[j]
    else:
        shares = spread(frees, amount)
    out: Grants = []
    for n, share in zip(nodes, shares, strict=True):
        if share:
            out.extend(place_in(pool, node_mask[n], share))
    return out


def _mask_of(pool: SlotPool, nodes: Sequence[Node]) -> int:
    mask = 0
    for n in nodes:
        mask |= pool.node_mask[n]
    return mask
