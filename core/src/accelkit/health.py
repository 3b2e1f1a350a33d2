"""Device health as plugins report it (DESIGN §15): states, reports and transitions.

A plugin reports each device's :class:`DeviceHealth` from ``device_health()`` and, where its
hardware can say so as it happens, yields :class:`HealthEvent` values from ``watch_health()``.
The node turns them into allocation decisions: an ``UNHEALTHY`` device takes no new grant until
it is healthy again; ``DEGRADED`` and ``UNKNOWN`` devices stay allocatable and are shown.

This module is part of the stable plugin-author surface (see the stability policy).
"""

from __future__ import annotations

import enum
import time
from decimal import Decimal

import attrs

from accelkit.reprs import attrs_eq, attrs_hash, attrs_repr
from accelkit.types import DeviceId

__all__ = ["DeviceHealth", "HealthEvent", "HealthState", "now"]


class HealthState(enum.StrEnum):
    """How a device is; only ``UNHEALTHY`` keeps it out of new grants."""

    HEALTHY = "healthy"
    DEGRADED = "degraded"
    UNHEALTHY = "unhealthy"
    UNKNOWN = "unknown"

    @property
    def allocatable(self) -> bool:
        """Whether a device in this state may take new grants."""
        return self is not HealthState.UNHEALTHY


def now() -> Decimal:
    """The current time as seconds since the epoch, a decimal (health timestamps use it)."""
    return Decimal(time.time_ns()) / Decimal(1_000_000_000)


def _timestamp(value: Decimal | int | str) -> Decimal:
    number = Decimal(value)
    if not number.is_finite() or number < 0:
        msg = f"not a timestamp: {value!r}"
        raise ValueError(msg)
    return number


@attrs.frozen(repr=False)
class DeviceHealth:
    """One device's health: its state, why (empty when healthy) and since when."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    state: HealthState = attrs.field(converter=HealthState)
    reason: str = ""
    since: Decimal = attrs.field(factory=now, converter=_timestamp)

    @classmethod
    def healthy(cls) -> DeviceHealth:
        """A healthy report, stamped now."""
        return cls(HealthState.HEALTHY)

    @property
    def allocatable(self) -> bool:
        """Whether the device may take new grants."""
        return self.state.allocatable


@attrs.frozen(repr=False)
class HealthEvent:
    """A device's health changed from ``old`` to ``new`` (``new.reason`` says why)."""

    __repr__ = attrs_repr
    __eq__ = attrs_eq
    __hash__ = attrs_hash

    device_id: DeviceId
    old: HealthState = attrs.field(converter=HealthState)
    new: DeviceHealth

    @property
    def reason(self) -> str:
        """Why the device's health changed."""
        return self.new.reason
