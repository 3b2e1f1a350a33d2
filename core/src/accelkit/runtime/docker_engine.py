"""The connection to a Docker Engine API (dockerd, or podman's Docker-compatible service).

One :class:`DockerEngine` per runtime: it speaks to the engine through
:class:`~accelkit.runtime.docker_http.EngineClient` (a connection per request, nothing to
import beyond asyncio), asks the engine once for its API version and CDI support (both
questions at once), and turns every failure of the engine into a clear accelkit error.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

from accelkit.errors import WorkloadError
from accelkit.runtime.base import RuntimeUnavailable, WorkloadUnreachable
from accelkit.runtime.docker_body import EngineFacts, docker_host
from accelkit.runtime.docker_http import EngineClient, EngineRefused
from accelkit.runtime.render.docker import MIN_API_VERSION

__all__ = ["DockerEngine"]
#: a dead engine must not hang accelkit: connecting gets this long; long calls (wait) have no limit
_CONNECT_TIMEOUT_S = 10.0
_CALL_TIMEOUT_S = 120.0


def _reason(exc: BaseException) -> str:
    """The operating-system reason behind a failed connection, else the error's own text."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    return str(exc) or type(exc).__name__


class DockerEngine:
    """A client for one engine address, errors translated."""

    def __init__(self, url: str | None = None) -> None:
        self.url = docker_host(url)
        self._client: EngineClient | None = None
        self._facts: EngineFacts | None = None

    def unreachable(self, exc: BaseException) -> WorkloadUnreachable:
        """The error for an engine that does not answer: what it runs may run on."""
        return WorkloadUnreachable(f"cannot reach the Docker engine at {self.url}: {_reason(exc)}")

    @contextlib.contextmanager
    def errors(self, doing: str) -> Iterator[None]:
        """Turn engine failures while ``doing`` something into accelkit errors.

        An engine that cannot be reached is :class:`WorkloadUnreachable` (a
        :class:`RuntimeUnavailable`: a container it runs may run on); an engine that refuses
        a request is a :class:`WorkloadError` with its message. Callers that expect a status
        (404 for a container that is gone) catch :class:`EngineRefused` inside this block.
        """
        try:
            yield
        except EngineRefused as exc:
            msg = f"Docker engine at {self.url}: {doing} failed: {exc.message}"
            raise WorkloadError(msg) from None
        except (TimeoutError, OSError, EOFError, ValueError) as exc:
            # ValueError: an address that is no engine's; EOFError: an answer cut short
            raise self.unreachable(exc) from None

    async def client(self) -> EngineClient:
        """The engine's client (its address checked)."""
        if self._client is None:
            with self.errors("connecting"):
                self._client = EngineClient(
                    self.url, connect_timeout=_CONNECT_TIMEOUT_S, call_timeout=_CALL_TIMEOUT_S
                )
        return self._client

    async def facts(self) -> EngineFacts:
        """Ask the engine once for its API version and CDI support."""
        if self._facts is not None:
            return self._facts
        client = await self.client()
        with self.errors("asking its version"):
            version, info = await asyncio.gather(
                client.request("GET", "/version"), client.request("GET", "/info")
            )
            facts = EngineFacts.from_engine(version or {}, info or {})
        if not facts.supported:
            msg = (
                f"the Docker engine at {self.url} ({facts.product}) speaks API "
                f"{facts.api_version}; accelkit needs {MIN_API_VERSION} or newer"
            )
            raise RuntimeUnavailable(msg)
        self._facts = facts
        return facts

    async def close(self) -> None:
        """Nothing stays open between requests; kept for the runtime's close."""
        self._client = None
