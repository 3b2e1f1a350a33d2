"""The mem plugin's lifecycle hook: limit the workload to the bytes it was allocated."""

from __future__ import annotations

from decimal import Decimal

from accelkit import InvalidResourceArgument
from accelkit.plugin import AbstractLifecycleHook
from accelkit.types import SlotName, WorkloadConfig

SLOT = SlotName("mem")


class MemLifecycleHook(AbstractLifecycleHook):
    """Sets ``memory_limit`` to the ``mem`` bytes allocated; no limit when none were."""

    def allocated_bytes(self) -> int:
        """The total of the ``mem`` slot's grants, a whole number of bytes."""
        total = sum(self.device_alloc.get(SLOT, {}).values(), Decimal(0))
        if total != total.to_integral_value() or total < 0:
            msg = f"mem allocation must be a whole, non-negative number of bytes, got {total}"
            raise InvalidResourceArgument(msg)
        return int(total)

    async def pre_create(self) -> WorkloadConfig:
        allocated = self.allocated_bytes()
        return WorkloadConfig(memory_limit=allocated) if allocated else WorkloadConfig()
