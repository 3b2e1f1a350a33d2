"""The mem plugin's section of the host config, ``[plugins.config.mem]``."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

import attrs

from accelkit.errors import ConfigError

OVERCOMMIT_KEY = "overcommit-factor"
MAX_OVERCOMMIT = Decimal(10)
_FULL_KEY = f"plugins.config.mem.{OVERCOMMIT_KEY}"


def _overcommit_factor(value: Any) -> Decimal:
    # floats are refused as everywhere amounts are read: "1.5" keeps its exact value
    if isinstance(value, bool) or not isinstance(value, int | str):
        msg = (
            f'must be a number from 1 to 10 as an integer or a string such as "1.5", got {value!r}'
        )
        raise ConfigError(msg, key=_FULL_KEY)
    try:
        factor = Decimal(value)
    except InvalidOperation:
        msg = f"must be a number from 1 to 10, got {value!r}"
        raise ConfigError(msg, key=_FULL_KEY) from None
    if not factor.is_finite() or not 1 <= factor <= MAX_OVERCOMMIT:
        msg = f"must be from 1 to 10, got {value!r}"
        raise ConfigError(msg, key=_FULL_KEY)
    return factor


@attrs.frozen
class MemConfig:
    """``overcommit-factor``: the ``mem`` slot offers this many times the usable memory
    (1 to 10, default 1; a string such as ``"1.5"`` for a fraction)."""

    overcommit_factor: Decimal = Decimal(1)

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> MemConfig:
        """Validate the section; an unknown key is an error, so a typo never passes silently."""
        if unknown := sorted(set(config) - {OVERCOMMIT_KEY}):
            msg = f"unknown key (allowed: {OVERCOMMIT_KEY!r})"
            raise ConfigError(msg, key=f"plugins.config.mem.{unknown[0]}")
        return cls(_overcommit_factor(config.get(OVERCOMMIT_KEY, 1)))
