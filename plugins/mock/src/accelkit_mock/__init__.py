"""accelkit-mock: devices declared in TOML, for tests, demos and vendors without hardware.

Register it under ``[plugins.config.mock]`` with ``config-file = "devices.toml"`` or inline
``[[plugins.config.mock.kinds]]`` tables; see :mod:`accelkit_mock.spec` for the format. Without
any config it offers no devices.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from accelkit import hookimpl
from accelkit.plugin import AbstractComputePlugin


@hookimpl
def accelkit_compute_plugins(config: Mapping[str, Any]) -> Sequence[AbstractComputePlugin]:
    """One plugin per declared kind of mock device."""
    from accelkit_mock.plugin import MockPlugin
    from accelkit_mock.spec import load_kinds

    return [MockPlugin.for_kind(kind, config) for kind in load_kinds(config)]
