"""Serving ``/metrics`` on the loopback interface for a Prometheus server to scrape."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from socketserver import ThreadingMixIn
from types import TracebackType
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

from accelkit.errors import AccelkitError

if TYPE_CHECKING:
    from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

#: the only address served: metrics stay on the node unless a local proxy forwards them
LOOPBACK = "127.0.0.1"
METRICS_PATH = "/metrics"


class MetricsServerError(AccelkitError):
    """The metrics endpoint could not be served (the port is taken, not permitted, ...)."""


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not logged: one line every few seconds would bury everything else."""


def metrics_only(app: WSGIApplication) -> WSGIApplication:
    """``app`` on ``/metrics``; every other path answers 404."""

    def serve(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == METRICS_PATH:
            return app(environ, start_response)
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [f"not found: accelkit serves {METRICS_PATH} only\n".encode()]

    return serve


class MetricsServer:
    """``/metrics`` of ``registry`` on ``127.0.0.1:port`` (port 0: any free port), in a thread.

    Use it as a context manager; :attr:`port` is the port actually bound.
    """

    def __init__(self, registry: CollectorRegistry, port: int) -> None:
        app = metrics_only(make_wsgi_app(registry))
        try:
            self._server = make_server(
                LOOPBACK, port, app, server_class=_ThreadingServer, handler_class=_QuietHandler
            )
        except OSError as exc:
            msg = f"cannot serve metrics on {LOOPBACK}:{port}: {exc.strerror or exc}"
            raise MetricsServerError(msg) from exc
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="accelkit-metrics", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_port)

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}{METRICS_PATH}"

    def __enter__(self) -> MetricsServer:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop serving and release the port."""
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()
