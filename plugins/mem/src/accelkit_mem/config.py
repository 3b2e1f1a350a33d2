"""The mem plugin's section of the host config, ``[plugins.config.mem]``, as a schema."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any

import attrs

from accelkit.config import Rule, read_section

MAX_OVERCOMMIT = Decimal(10)


def _overcommit_factor(value: Any) -> Decimal:
    # floats are refused as everywhere amounts are read: "1.5" keeps its exact value
    if isinstance(value, bool) or not isinstance(value, int | str):
        msg = (
            f'must be a number from 1 to 10 as an integer or a string such as "1.5", got {value!r}'
        )
        raise ValueError(msg)
    try:
        factor = Decimal(value)
    except InvalidOperation:
        msg = f"must be a number from 1 to 10, got {value!r}"
        raise ValueError(msg) from None
    if not factor.is_finite() or not 1 <= factor <= MAX_OVERCOMMIT:
        msg = f"must be from 1 to 10, got {value!r}"
        raise ValueError(msg)
    return factor


@attrs.frozen
class MemConfig:
    """``overcommit-factor``: the ``mem`` slot offers this many times the usable memory
    (1 to 10, default 1; a string such as ``"1.5"`` for a fraction)."""

    overcommit_factor: Annotated[Decimal, Rule(_overcommit_factor)] = Decimal(1)

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> MemConfig:
        """Read the section; an unknown key is an error, so a typo never passes silently.

        Raises:
            ConfigError: naming the key within the section (``overcommit-factor``).
        """
        return read_section(cls, config)
