"""Allocation maps: who holds how much of which device, per slot.

:class:`DiscretePropertyAllocMap` hands out whole units (cores, whole GPUs, bytes);
:class:`FractionAllocMap` hands out multiples of a quantum (GPU shares). Both honour a device
mask, exclusive slot types, UNIQUE slots, NUMA affinity hints, and are atomic and thread-safe.
"""

from __future__ import annotations

from accelkit.allocmap.affinity import AffinityHint, AffinityPolicy
from accelkit.allocmap.base import AbstractAllocMap
from accelkit.allocmap.discrete import DiscretePropertyAllocMap
from accelkit.allocmap.fraction import FractionAllocMap
from accelkit.allocmap.strategy import AllocationStrategy

__all__ = [
    "AbstractAllocMap",
    "AffinityHint",
    "AffinityPolicy",
    "AllocationStrategy",
    "DiscretePropertyAllocMap",
    "FractionAllocMap",
]
