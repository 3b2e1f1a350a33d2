"""Serving a partition host's metrics over HTTP until told to stop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from accelkit.config import HostConfig
from accelkit.host import PartitionHost
from accelkit.metrics_export.exposition import Exposition
from accelkit.metrics_export.gather import MetricsGatherer
from accelkit.metrics_export.server import MetricsServer


def exposition_for(host: PartitionHost) -> Exposition:
    """Scrapes of ``host``'s metrics, each device series with its DCGM labels."""
    found = host.device_map  # the DCGM labels of each device series come from here
    return Exposition(MetricsGatherer(host), lambda: {k: v.devices for k, v in found.items()})


async def serve_metrics(
    config: HostConfig,
    port: int,
    *,
    on_ready: Callable[[MetricsServer], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Start the host, serve ``/metrics`` on loopback, and keep serving until ``stop`` is set.

    Without ``stop`` it serves until the task is cancelled or the process interrupted. Each
    plugin has ``[plugins] call-timeout`` seconds per scrape, or less when the scraper's
    timeout header says so; the scrape answers with the plugins that answered in time.
    """
    async with (
        PartitionHost.open(config) as host,
        MetricsServer(exposition_for(host).render, port) as server,
    ):
        if on_ready is not None:
            on_ready(server)
        await (stop or asyncio.Event()).wait()
