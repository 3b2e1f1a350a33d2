"""Serving ``/metrics`` on the loopback interface for a Prometheus server to scrape (DESIGN §17).

aiohttp serves it on the event loop the plugins run on, so a scrape awaits the gather directly:
no thread per connection (an idle connection costs a socket, not a thread), a listen backlog of
:data:`BACKLOG`, silent connections dropped after :data:`IDLE_TIMEOUT` seconds, and at the
descriptor limit asyncio pauses accepting for a moment instead of retrying in a busy loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from decimal import Decimal
from types import TracebackType

from aiohttp import web

from accelkit.errors import AccelkitError
from accelkit.metrics_export.exposition import SCRAPE_TIMEOUT_HEADER, scrape_budget

__all__ = [
    "BACKLOG",
    "IDLE_TIMEOUT",
    "LOOPBACK",
    "METRICS_PATH",
    "MetricsServer",
    "MetricsServerError",
    "Render",
]

#: the only address served: metrics stay on the node unless a local proxy forwards them
LOOPBACK = "127.0.0.1"
METRICS_PATH = "/metrics"
#: connections the kernel queues before accepting (the kernel caps it at net.core.somaxconn)
BACKLOG = 1024
#: seconds a connection may stay silent (before its request or between requests)
IDLE_TIMEOUT = 10.0
#: seconds closing waits for scrapes under way
SHUTDOWN_TIMEOUT = 5.0

#: the body and content type of one scrape, from its time budget and its Accept header
Render = Callable[[Decimal | None, str | None], Awaitable[tuple[bytes, str]]]


class MetricsServerError(AccelkitError):
    """The metrics endpoint could not be served (the port is taken, not permitted, ...)."""


async def _not_found(request: web.Request) -> web.Response:
    return web.Response(status=404, text=f"not found: accelkit serves {METRICS_PATH} only\n")


async def _not_allowed(request: web.Request) -> web.Response:
    text = f"method {request.method} not allowed: {METRICS_PATH} is read with GET or HEAD\n"
    return web.Response(status=405, text=text, headers={"Allow": "GET, HEAD"})


class MetricsServer:
    """``/metrics`` answered by ``render`` on ``host:port`` (port 0: any free port).

    ``host`` is a loopback address, ``127.0.0.1`` unless told (``::1`` for IPv6). Use it as
    ``async with MetricsServer(render, port) as server:`` inside the running event loop;
    :attr:`port` is the port actually bound.
    """

    def __init__(
        self,
        render: Render,
        port: int,
        *,
        host: str = LOOPBACK,
        idle_timeout: float = IDLE_TIMEOUT,
    ) -> None:
        self._render = render
        self._wanted = port
        self._host = host
        app = web.Application()
        app.router.add_get(METRICS_PATH, self._metrics)  # and HEAD
        app.router.add_route("*", METRICS_PATH, _not_allowed)
        app.router.add_route("*", "/{tail:.*}", _not_found)
        self._runner = web.AppRunner(
            app,
            access_log=None,  # one line per scrape would bury everything else
            keepalive_timeout=idle_timeout,
            shutdown_timeout=SHUTDOWN_TIMEOUT,
        )
        self._site: web.TCPSite | None = None
        self._port: int | None = None

    async def _metrics(self, request: web.Request) -> web.Response:
        budget = scrape_budget(request.headers.get(SCRAPE_TIMEOUT_HEADER))
        body, content_type = await self._render(budget, request.headers.get("Accept"))
        response = web.Response(body=body, headers={"Content-Type": content_type})
        response.enable_compression()  # gzip when the scraper accepts it, as Prometheus does
        return response

    async def start(self) -> None:
        """Bind and listen.

        Raises:
            MetricsServerError: the port cannot be bound.
        """
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._wanted, backlog=BACKLOG)
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            where = f"{self._netloc_host}:{self._wanted}"
            msg = f"cannot serve metrics on {where}: {exc.strerror or exc}"
            raise MetricsServerError(msg) from exc
        self._site = site
        self._port = int(self._runner.addresses[0][1])

    @property
    def port(self) -> int:
        if self._port is None:
            msg = "the metrics server is not started"
            raise RuntimeError(msg)
        return self._port

    @property
    def _netloc_host(self) -> str:
        return f"[{self._host}]" if ":" in self._host else self._host

    @property
    def url(self) -> str:
        return f"http://{self._netloc_host}:{self.port}{METRICS_PATH}"

    async def __aenter__(self) -> MetricsServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop serving and release the port."""
        await self._runner.cleanup()
        self._site = None
