"""Serving a partition host's metrics over HTTP until told to stop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from prometheus_client import CollectorRegistry

from accelkit.config import HostConfig
from accelkit.host import PartitionHost
from accelkit.metrics_export.gather import MetricsGatherer
from accelkit.metrics_export.prometheus import SnapshotCollector
from accelkit.metrics_export.server import MetricsServer
from accelkit.metrics_export.snapshot import MetricsSnapshot

#: seconds a scrape waits for the plugins before it fails
SCRAPE_TIMEOUT = 30.0


def registry_for(gatherer: MetricsGatherer, loop: asyncio.AbstractEventLoop) -> CollectorRegistry:
    """A registry whose scrapes, served on another thread, gather on ``loop``."""

    def snapshot() -> MetricsSnapshot:
        future = asyncio.run_coroutine_threadsafe(gatherer.gather(), loop)
        return future.result(SCRAPE_TIMEOUT)

    # auto_describe stays off: registering must not gather, the loop is busy registering
    registry = CollectorRegistry(auto_describe=False)
    found = gatherer.host.device_map  # the DCGM labels of each device series come from here
    registry.register(SnapshotCollector(snapshot, lambda: {k: v.devices for k, v in found.items()}))
    return registry


async def serve_metrics(
    config: HostConfig,
    port: int,
    *,
    on_ready: Callable[[MetricsServer], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Start the host, serve ``/metrics`` on loopback, and keep serving until ``stop`` is set.

    Without ``stop`` it serves until the task is cancelled or the process interrupted.
    """
    async with PartitionHost.open(config) as host:
        registry = registry_for(MetricsGatherer(host), asyncio.get_running_loop())
        with MetricsServer(registry, port) as server:
            if on_ready is not None:
                on_ready(server)
            await (stop or asyncio.Event()).wait()
