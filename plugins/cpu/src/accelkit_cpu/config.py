"""The cpu plugin's section of the host config, ``[plugins.config.cpu]``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from accelkit.errors import ConfigError

OVERCOMMIT_KEY = "overcommit-factor"
MAX_OVERCOMMIT = 10
_FULL_KEY = f"plugins.config.cpu.{OVERCOMMIT_KEY}"


def _overcommit_factor(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        msg = f"must be a whole number from 1 to {MAX_OVERCOMMIT}, got {value!r}"
        raise ConfigError(msg, key=_FULL_KEY)
    try:
        factor = int(value)
    except ValueError:
        msg = f"must be a whole number from 1 to {MAX_OVERCOMMIT}, got {value!r}"
        raise ConfigError(msg, key=_FULL_KEY) from None
    if not 1 <= factor <= MAX_OVERCOMMIT:
        msg = f"must be from 1 to {MAX_OVERCOMMIT}, got {factor}"
        raise ConfigError(msg, key=_FULL_KEY)
    return factor


@attrs.frozen
class CPUConfig:
    """``overcommit-factor``: how many ``cpu`` slots each core offers (1 to 10, default 1)."""

    overcommit_factor: int = 1

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> CPUConfig:
        """Validate the section; an unknown key is an error, so a typo never passes silently."""
        if unknown := sorted(set(config) - {OVERCOMMIT_KEY}):
            msg = f"unknown key (allowed: {OVERCOMMIT_KEY!r})"
            raise ConfigError(msg, key=f"plugins.config.cpu.{unknown[0]}")
        return cls(_overcommit_factor(config.get(OVERCOMMIT_KEY, 1)))
