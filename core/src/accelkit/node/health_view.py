"""Device health for read-only commands (``devices``, ``plan``): no ledger, no booking.

The plugins are asked (under call-timeout) and the cordons of the state directory applied,
exactly as a node would, on a board of its own.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from accelkit.calls import call_async
from accelkit.config.model import HostConfig
from accelkit.health import DeviceHealth
from accelkit.node.health_board import HealthBoard
from accelkit.node.health_cordons import CordonFile
from accelkit.plugin import AbstractComputePlugin
from accelkit.types import DeviceId, DeviceName

__all__ = ["health_json", "read_health"]

log = logging.getLogger(__name__)


async def read_health(
    plugins: Iterable[AbstractComputePlugin], config: HostConfig
) -> tuple[Mapping[DeviceName, Mapping[DeviceId, DeviceHealth]], list[str]]:
    """Every device's effective health and the problems met (a plugin that failed to say)."""
    board = HealthBoard()
    problems: list[str] = []
    limit: Decimal | float = config.plugins.call_timeout
    for plugin in plugins:
        known = {d.device_id for d in plugin.devices}
        for device in sorted(known):
            board.report(plugin.key, device, DeviceHealth.healthy())
        try:
            reports = await call_async(plugin.key, "device_health", limit, plugin.device_health)
        except Exception as exc:
            problems.append(f"plugin {plugin.key!r} device_health failed: {exc}")
            continue
        if not isinstance(reports, Mapping):
            problems.append(f"plugin {plugin.key!r} device_health returned {reports!r:.200}")
            continue
        for device, health in reports.items():
            if device in known and isinstance(health, DeviceHealth):
                board.report(plugin.key, device, health)
    cordons = CordonFile(config.resource.state_dir, source=config.source_name)
    board.set_cordons(cordons.read())
    return board.snapshot(), problems


def health_json(health: DeviceHealth) -> dict[str, Any]:
    """``{"state", "reason", "since"}`` as ``devices --json`` and ``status --json`` print it."""
    return {"state": health.state.value, "reason": health.reason, "since": str(health.since)}
