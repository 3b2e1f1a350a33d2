"""Allocation maps: who holds how much of which device, per slot.

:class:`DiscretePropertyAllocMap` hands out whole units (cores, whole GPUs, bytes);
:class:`FractionAllocMap` hands out multiples of a quantum (GPU shares). Both honour a device
mask, exclusive slot types, UNIQUE slots, NUMA affinity hints, and are atomic and thread-safe.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accelkit.allocmap.affinity import AffinityHint, AffinityPolicy
from accelkit.allocmap.base import AbstractAllocMap
from accelkit.allocmap.discrete import DiscretePropertyAllocMap
from accelkit.allocmap.strategy import AllocationStrategy
from accelkit.lazy import lazy_names

if TYPE_CHECKING:  # imported when first used: most nodes' maps are discrete
    from accelkit.allocmap.fraction import FractionAllocMap

__all__ = [
    "AbstractAllocMap",
    "AffinityHint",
    "AffinityPolicy",
    "AllocationStrategy",
    "DiscretePropertyAllocMap",
    "FractionAllocMap",
]

__getattr__ = lazy_names(__name__, {"FractionAllocMap": ".fraction"})
