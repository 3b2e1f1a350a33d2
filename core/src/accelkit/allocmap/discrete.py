"""Alloc map for slots handed out in whole units (cores, whole GPUs, bytes)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal

from accelkit.allocmap import fillrule
from accelkit.allocmap.affinity import AffinityHint
from accelkit.allocmap.base import AbstractAllocMap
from accelkit.allocmap.checks import not_whole
from accelkit.allocmap.placement import Grants, check_unique, evenly, place
from accelkit.allocmap.pool import SlotPool
from accelkit.allocmap.strategy import AllocationStrategy
from accelkit.errors import InvalidResourceArgument
from accelkit.types import DeviceId, DeviceSlotInfo, SlotSpec, SlotType


class DiscretePropertyAllocMap(AbstractAllocMap):
    """Alloc map whose amounts are whole numbers: COUNT and BYTES slots, and UNIQUE slots.

    A request that is not a whole number raises
    :class:`~accelkit.errors.InvalidResourceArgument` rather than being truncated. FILL takes
    from the most free device first; EVENLY spreads a request as evenly as the free amounts
    allow (capacities 10/10/10, request 7 → 3/2/2; the units left over from an even division go
    to the most free devices, the first listed on a tie). A device's capacity is rounded down to
    a whole number; a UNIQUE device counts as one unit and is handed out whole. Its divisible
    slots (``mem``) are divided in units of 1; a slot declared divisible by another quantum
    needs a :class:`~accelkit.allocmap.FractionAllocMap`.
    """

    def __init__(
        self,
        device_slots: Mapping[DeviceId, DeviceSlotInfo],
        *,
        device_mask: Iterable[DeviceId] | None = None,
        exclusive_slot_types: Iterable[str] = (),
        strategy: AllocationStrategy = AllocationStrategy.EVENLY,
        slot_specs: Iterable[SlotSpec] = (),
    ) -> None:
        super().__init__(
            device_slots,
            device_mask=device_mask,
            exclusive_slot_types=exclusive_slot_types,
            strategy=strategy,
            slot_specs=slot_specs,
        )
        self._place_in = fillrule.fill if self._strategy is AllocationStrategy.FILL else evenly
        # one unit more than the largest pool holds (the pools share one conversion cache)
        self._beyond_capacity = max((p.total_cap for p in self._pools.values()), default=0) + 1

    def _capacity_units(self, slot_type: SlotType, amount: Decimal) -> int:
        if slot_type is SlotType.UNIQUE:
            return 1 if amount > 0 else 0
        # DeviceSlotInfo keeps capacities within the amount range (types.AMOUNT_DIGITS)
        return int(amount)

    def _conversion_kind(self, pool: SlotPool) -> str:
        return "whole"

    def _convert(self, pool: SlotPool, amount: Decimal) -> int:
        if amount > self._beyond_capacity:
            # More than any pool of the map holds: any count above every capacity is refused
            # the same way, and int() of a huge amount such as 1e999999 would take minutes.
            if amount != amount.to_integral_value():
                msg = not_whole(pool, amount)
                raise InvalidResourceArgument(msg)
            return self._beyond_capacity
        units = int(amount)
        if units != amount:
            msg = not_whole(pool, amount)
            raise InvalidResourceArgument(msg)
        return units

    def _make_amount(self, pool: SlotPool, units: int) -> Decimal:
        return Decimal(units)

    def _fills_most_free(self) -> bool:
        return self._strategy is AllocationStrategy.FILL

    def _quick_place(self, pool: SlotPool, units: int, requested: Decimal) -> Grants:
        # A request without a hint on a pool of several devices (not UNIQUE).
        return self._place_in(pool, pool.all_mask, units)

    def _place(
        self, pool: SlotPool, units: int, hint: AffinityHint | None, requested: Decimal
    ) -> Grants:
        if pool.unique:
            check_unique(pool, units, requested)
        if not pool.bucketed:
            return [(0, units)]
        if hint is None:
            return self._place_in(pool, pool.all_mask, units)
        return place(pool, units, hint, self._place_in, single_fit=False)
