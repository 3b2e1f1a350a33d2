"""The cpu plugin's section of the host config, ``[plugins.config.cpu]``, as a schema."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Annotated, Any

import attrs

from accelkit.config import SECONDS, int_between, read_section

MAX_OVERCOMMIT = 10


@attrs.frozen
class CPUConfig:
    """The cpu plugin's settings.

    ``overcommit-factor``: how many ``cpu`` slots each core offers (1 to 10, default 1);
    ``health-interval``: seconds between two looks at which cores are online while
    ``watch_health()`` runs (default 2).
    """

    overcommit_factor: Annotated[int, int_between(1, MAX_OVERCOMMIT)] = 1
    health_interval: Annotated[Decimal, SECONDS] = Decimal(2)

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> CPUConfig:
        """Read the section; an unknown key is an error, so a typo never passes silently.

        Raises:
            ConfigError: naming the key within the section (``overcommit-factor``,
                ``health-interval``).
        """
        return read_section(cls, config)
