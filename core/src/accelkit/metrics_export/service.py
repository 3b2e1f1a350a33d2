"""Serving a partition host's metrics over HTTP until told to stop."""

from __future__ import annotations

import asyncio
import errno
import logging
from collections.abc import Callable
from typing import Any

from accelkit.config import HostConfig
from accelkit.host import PartitionHost
from accelkit.metrics_export.exposition import Exposition
from accelkit.metrics_export.gather import MetricsGatherer
from accelkit.metrics_export.server import MetricsServer

log = logging.getLogger(__name__)

#: what accept() fails with at a resource limit; asyncio then pauses accepting for a second
_EXHAUSTED = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


def exposition_for(host: PartitionHost) -> Exposition:
    """Scrapes of ``host``'s metrics, each device series with its DCGM labels."""
    found = host.device_map  # the DCGM labels of each device series come from here
    return Exposition(MetricsGatherer(host), lambda: {k: v.devices for k, v in found.items()})


def _accept_failures_in_one_line(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """At the descriptor limit, a line per retry instead of a traceback per retry."""
    exc = context.get("exception")
    if isinstance(exc, OSError) and exc.errno in _EXHAUSTED:
        log.warning("metrics: cannot accept a connection (%s); retrying", exc.strerror)
        return
    loop.default_exception_handler(context)


async def serve_metrics(
    config: HostConfig,
    port: int,
    *,
    on_ready: Callable[[MetricsServer], None] | None = None,
    stop: asyncio.Event | None = None,
    on_host: Callable[[PartitionHost], None] | None = None,
) -> None:
    """Start the host, serve ``/metrics`` on loopback, and keep serving until ``stop`` is set.

    Without ``stop`` it serves until the task is cancelled or the process interrupted. Each
    plugin has ``[plugins] call-timeout`` seconds per scrape, or less when the scraper's
    timeout header says so; the scrape answers with the plugins that answered in time.
    ``on_host`` sees the started host before serving begins (the command prints its warnings).
    """
    asyncio.get_running_loop().set_exception_handler(_accept_failures_in_one_line)
    async with (
        PartitionHost.open(config) as host,
        MetricsServer(exposition_for(host).render, port) as server,
    ):
        if on_host is not None:
            on_host(host)
        if on_ready is not None:
            on_ready(server)
        await (stop or asyncio.Event()).wait()
