"""The cuda plugin's section of the host config, parsed and checked once."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import attrs

from accelkit.errors import ConfigError
from accelkit.types import to_decimal


class DeviceIdMode(enum.StrEnum):
    """How device ids are spelled: ``cuda<index>`` or the NVML UUID."""

    INDEX = "index"
    UUID = "uuid"


class AllocationMode(enum.StrEnum):
    """Whole GPUs (``cuda.device``) or shares of GPUs (``cuda.shares``)."""

    DISCRETE = "discrete"
    FRACTIONAL = "fractional"


_KEYS = frozenset(
    {"device-id", "allocation", "shares-per-device", "quantum", "allow-fragmentation"}
)


def _choice(
    config: Mapping[str, Any], key: str, enum_type: type[enum.StrEnum], default: str
) -> str:
    value = config.get(key, default)
    allowed = [member.value for member in enum_type]
    if value not in allowed:
        msg = f"must be one of {allowed}, got {value!r}"
        raise ConfigError(msg, key=key)
    return str(value)


def _positive_amount(config: Mapping[str, Any], key: str, default: str) -> Decimal:
    raw = config.get(key, default)
    try:
        value = to_decimal(raw)
    except (TypeError, ValueError):
        msg = f"must be a decimal string such as {default!r} (not a float), got {raw!r}"
        raise ConfigError(msg, key=key) from None
    if value <= 0:
        msg = f"must be greater than zero, got {raw!r}"
        raise ConfigError(msg, key=key)
    return value


@attrs.frozen
class CUDAConfig:
    """Validated plugin settings; see the :mod:`accelkit_cuda` docstring for the keys."""

    device_id: DeviceIdMode = DeviceIdMode.INDEX
    allocation: AllocationMode = AllocationMode.DISCRETE
    shares_per_device: Decimal = Decimal(1)
    quantum: Decimal = Decimal("0.01")
    allow_fragmentation: bool = True

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> CUDAConfig:
        """Parse ``[plugins.config.cuda]``; a bad key or value is a :class:`ConfigError`."""
        if unknown := sorted(set(config) - _KEYS):
            msg = f"unknown key(s) {unknown}; known keys are {sorted(_KEYS)}"
            raise ConfigError(msg, key=unknown[0])
        shares = _positive_amount(config, "shares-per-device", "1")
        quantum = _positive_amount(config, "quantum", "0.01")
        if shares % quantum != 0:
            msg = f"shares-per-device {shares} is not a multiple of the quantum {quantum}"
            raise ConfigError(msg, key="shares-per-device")
        fragmentation = config.get("allow-fragmentation", True)
        if not isinstance(fragmentation, bool):
            msg = f"must be true or false, got {fragmentation!r}"
            raise ConfigError(msg, key="allow-fragmentation")
        return cls(
            device_id=DeviceIdMode(_choice(config, "device-id", DeviceIdMode, "index")),
            allocation=AllocationMode(_choice(config, "allocation", AllocationMode, "discrete")),
            shares_per_device=shares,
            quantum=quantum,
            allow_fragmentation=fragmentation,
        )
