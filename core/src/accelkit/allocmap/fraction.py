"""Alloc map for slots shared in fractions of a device (GPU shares)."""

from __future__ import annotations

import decimal
from collections.abc import Iterable, Mapping
from decimal import Decimal

from accelkit.allocmap import fillrule
from accelkit.allocmap.affinity import AffinityHint
from accelkit.allocmap.base import AbstractAllocMap
from accelkit.allocmap.checks import not_whole
from accelkit.allocmap.fastpath import QuickPlace
from accelkit.allocmap.placement import (
    Grants,
    best_fit,
    check_unique,
    evenly,
    fraction_evenly,
    fraction_fill,
    place,
)
from accelkit.allocmap.pool import SlotPool
from accelkit.allocmap.strategy import AllocationStrategy
from accelkit.errors import (
    FractionalResourceFragmented,
    InvalidResourceArgument,
    NotMultipleOfQuantum,
)
from accelkit.types import (
    DeviceId,
    DeviceSlotInfo,
    SlotSpec,
    SlotType,
    amount_in_range,
    describe_amount,
    format_amount,
    range_problem,
    to_decimal,
)

# Products of a unit count and the quantum must never round.
#: amounts of more digits than this before the point are not converted exactly
_ABSURD_DIGITS = 30
_EXACT = decimal.Context(prec=decimal.MAX_PREC, traps=[decimal.Inexact, decimal.InvalidOperation])


class FractionAllocMap(AbstractAllocMap):
    """Alloc map whose amounts are multiples of ``quantum_size``.

    Grants are multiples of the quantum and add up exactly to the request; a request that is
    not a multiple raises :class:`~accelkit.errors.NotMultipleOfQuantum`. A request that fits
    on one device goes to one device: under FILL the most free one, under EVENLY the one it
    fits best. A larger request goes, under FILL, to the most free devices in turn and, under
    EVENLY, to as few devices as keep the grants even (2 devices of 1.0, request 1.5 → 0.75 + 0.75);
    when no number of devices keeps them even, to the most even split the free amounts allow
    (free 0.3/0.3/0.9, request 1 → 0.3 + 0.3 + 0.4).

    With ``allow_fragmentation=False`` a request that cannot be placed on
    ``ceil(request / largest device capacity)`` devices raises
    :class:`~accelkit.errors.FractionalResourceFragmented`. A device's capacity is rounded down
    to the quantum; UNIQUE slots are handed out whole, one device per request of 1, and other
    whole slots (``slot_specs``) in whole units, placed as a discrete map places them.
    """

    _divides_devices = True

    def __init__(
        self,
        device_slots: Mapping[DeviceId, DeviceSlotInfo],
        *,
        device_mask: Iterable[DeviceId] | None = None,
        exclusive_slot_types: Iterable[str] = (),
        strategy: AllocationStrategy = AllocationStrategy.EVENLY,
        quantum_size: Decimal = Decimal("0.01"),
        allow_fragmentation: bool = True,
        slot_specs: Iterable[SlotSpec] = (),
    ) -> None:
        try:
            quantum = to_decimal(quantum_size)
        except (TypeError, ValueError) as exc:
            msg = f"quantum_size: {exc}"
            raise InvalidResourceArgument(msg) from exc
        if quantum <= 0:
            msg = f"quantum_size must be positive, got {quantum}"
            raise InvalidResourceArgument(msg)
        if not amount_in_range(quantum):  # its grants could not be booked in the ledger
            msg = f"quantum_size {range_problem(quantum)}"
            raise InvalidResourceArgument(msg)
        if quantum.as_tuple().exponent > 0:  # type: ignore[operator]
            # Keep grants in plain integer form (100, not 1E+2).
            quantum = quantum.quantize(Decimal(1))
        self._quantum = quantum
        self._qn, self._qd = quantum.as_integer_ratio()
        self._allow_fragmentation = bool(allow_fragmentation)
        super().__init__(
            device_slots,
            device_mask=device_mask,
            exclusive_slot_types=exclusive_slot_types,
            strategy=strategy,
            slot_specs=slot_specs,
        )
        self._fill = self._strategy is AllocationStrategy.FILL
        self._whole_place = fillrule.fill if self._fill else evenly
        self._split = fraction_fill if self._fill else fraction_evenly
        # one unit more than the largest pool holds: what an absurd request converts to
        self._beyond_capacity = max((p.total_cap for p in self._pools.values()), default=0) + 1
        self._beyond_amount = _EXACT.multiply(Decimal(self._beyond_capacity), quantum)

    @property
    def quantum_size(self) -> Decimal:
        """Every grant is a whole multiple of this amount."""
        return self._quantum

    @property
    def allow_fragmentation(self) -> bool:
        """Whether a request may be spread over more devices than it strictly needs."""
        return self._allow_fragmentation

    def _divisible_unit(self) -> Decimal:
        return self._quantum

    def _capacity_units(self, slot_type: SlotType, amount: Decimal) -> int:
        # whole slots (UNIQUE ones included) are counted by the base map
        n, d = amount.as_integer_ratio()
        return (n * self._qd) // (d * self._qn)

    def _conversion_kind(self, pool: SlotPool) -> str:
        return "whole" if pool.whole else "quantum"

    def _convert(self, pool: SlotPool, amount: Decimal) -> int:
        if pool.unique:
            units = int(amount) if amount.adjusted() <= _ABSURD_DIGITS else -1
            if units != amount:
                msg = f"slot {pool.name!r} is UNIQUE and takes whole amounts, not {amount}"
                raise InvalidResourceArgument(msg)
            return units
        if pool.whole:
            if amount != amount.to_integral_value():
                msg = not_whole(pool, amount)
                raise InvalidResourceArgument(msg)
            return self._beyond_capacity if amount > self._beyond_capacity else int(amount)
        if amount.adjusted() > _ABSURD_DIGITS and amount > self._beyond_amount:
            # beyond every capacity by dozens of digits: refused as insufficient without
            # building the exact ratio of an amount such as 1E+999999
            return self._beyond_capacity
        if amount < self._quantum:  # below one quantum and above zero (zero is skipped)
            msg = (
                f"slot {pool.name!r}: {describe_amount(amount)} is not a multiple of the "
                f"quantum {format_amount(self._quantum)}"
            )
            raise NotMultipleOfQuantum(msg)
        n, d = amount.as_integer_ratio()
        units, rest = divmod(n * self._qd, d * self._qn)
        if rest:
            msg = (
                f"slot {pool.name!r}: {describe_amount(amount)} is not a multiple of the "
                f"quantum {format_amount(self._quantum)}"
            )
            raise NotMultipleOfQuantum(msg)
        return units

    def _make_amount(self, pool: SlotPool, units: int) -> Decimal:
        if pool.whole:
            return Decimal(units)
        return _EXACT.multiply(Decimal(units), self._quantum)

    def _place_in(self, pool: SlotPool, mask: int, units: int) -> Grants:
        grants = self._split(pool, mask, units, None)
        assert grants is not None  # without a device limit a placement always exists
        return grants

    def _fills_most_free(self) -> bool:
        # without fragmentation a split must also fit on as few devices as it needs
        return self._strategy is AllocationStrategy.FILL and self._allow_fragmentation

    def _quick_place(self, pool: SlotPool, units: int, requested: Decimal) -> Grants:
        # A request without a hint on a pool of several devices (not UNIQUE, not whole).
        if not self._fill:
            fit = best_fit(pool, pool.all_mask, units)
            if fit >= 0:
                return [(fit, units)]
        limit = None if self._allow_fragmentation else -(-units // pool.max_cap)
        grants = self._split(pool, pool.all_mask, units, limit)
        if grants is None:
            raise self._fragmented(pool, requested, limit)
        return grants

    def _quick_placer(self) -> QuickPlace:
        # Only maps with whole slots pay for telling them apart on the fast path.
        if any(p.whole and not p.unique for p in self._pools.values()):
            return self._quick_place_by_kind
        return self._quick_place

    def _quick_place_by_kind(self, pool: SlotPool, units: int, requested: Decimal) -> Grants:
        if pool.whole:
            return self._whole_place(pool, pool.all_mask, units)
        return self._quick_place(pool, units, requested)

    def _fragmented(
        self, pool: SlotPool, requested: Decimal, limit: int | None
    ) -> FractionalResourceFragmented:
        msg = (
            f"slot {pool.name!r}: {describe_amount(requested)} cannot be placed on "
            f"{limit} device(s) without fragmenting it"
        )
        return FractionalResourceFragmented(msg)

    def _place(
        self, pool: SlotPool, units: int, hint: AffinityHint | None, requested: Decimal
    ) -> Grants:
        if pool.whole:
            return self._place_whole(pool, units, hint, requested)
        if not pool.bucketed:
            return [(0, units)]
        if hint is None:
            return self._quick_place(pool, units, requested)
        grants = place(pool, units, hint, self._place_in, single_fit=True)
        if not self._allow_fragmentation:
            limit = -(-units // pool.max_cap)
            if len(grants) > limit:
                # Affinity is a preference, the fragmentation guard a rule: try once more
                # over all devices before refusing.
                retry = self._split(pool, pool.all_mask, units, limit)
                if retry is None:
                    raise self._fragmented(pool, requested, limit)
                grants = retry
        return grants

    def _place_whole(
        self, pool: SlotPool, units: int, hint: AffinityHint | None, requested: Decimal
    ) -> Grants:
        # UNIQUE devices one per request; other whole slots as a discrete map places them
        if pool.unique:
            check_unique(pool, units, requested)
        if not pool.bucketed:
            return [(0, units)]
        if pool.unique:
            return place(pool, units, hint, fillrule.fill, single_fit=False)
        if hint is None:
            return self._whole_place(pool, pool.all_mask, units)
        return place(pool, units, hint, self._whole_place, single_fit=False)
