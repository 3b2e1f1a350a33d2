"""How an alloc map spreads one request over the devices it may use."""

from __future__ import annotations

import enum


class AllocationStrategy(enum.StrEnum):
    """Device-level placement strategy of an alloc map.

    ``FILL`` takes from the device with the most free capacity first, moving on to the next
    most free one only when the first is exhausted. ``EVENLY`` spreads a request as evenly as
    the free amounts allow (discrete maps) or over as few devices as keep the grants even
    (fraction maps).
    """

    FILL = "fill"
    EVENLY = "evenly"
