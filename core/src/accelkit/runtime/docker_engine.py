"""The connection to a Docker Engine API (dockerd, or podman's Docker-compatible service).

One :class:`DockerEngine` per runtime: it opens an ``aiodocker`` client on first use (in the
running event loop), asks the engine once for its API version and CDI support (both questions
at once), and turns every failure of the engine into a clear accelkit error instead of an
aiohttp traceback.

Asking the version takes two round trips (the client learns which API version to speak, then
asks at it) unless the engine's version is known: a ledger keeps the API version each engine it
ran containers on last spoke (:class:`KnownVersions`, a file in its state directory), and an
engine asked at that version answers both questions in one round trip. The answers are always
the engine's own; the file only names the version to ask at, and an engine that no longer
speaks it (or speaks a newer one) is asked the long way and noted again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import aiodocker
import aiohttp

from accelkit.errors import WorkloadError
from accelkit.runtime.base import RuntimeUnavailable, WorkloadUnreachable
from accelkit.runtime.docker_body import EngineFacts, docker_host
from accelkit.runtime.render.docker import MIN_API_VERSION, DockerApiVersion

__all__ = ["DockerEngine", "KnownVersions"]
log = logging.getLogger(__name__)
#: a dead engine must not hang accelkit: connecting gets this long; long calls (wait) have no limit
_CONNECT_TIMEOUT_S = 10.0
_CALL_TIMEOUT_S = 120.0


def _reason(exc: BaseException) -> str:
    """The operating-system reason behind a failed connection, else the error's own text."""
    cause = exc.__cause__ or exc.__context__
    os_error = getattr(cause, "os_error", None)
    if isinstance(os_error, OSError) and os_error.strerror:
        return os_error.strerror
    if isinstance(cause, OSError) and cause.strerror:
        return cause.strerror
    if isinstance(exc, aiodocker.DockerError):
        return exc.message
    return str(exc) or type(exc).__name__


class KnownVersions:
    """The API version each engine last spoke, by address: ``docker-engines.json`` in a
    ledger's state directory. Unreadable or unwritable, it is as if empty."""

    FILE = "docker-engines.json"

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / self.FILE

    def _read(self) -> dict[str, str]:
        try:
            found = json.loads(self.path.read_bytes())
        except (OSError, ValueError):
            return {}
        if not isinstance(found, dict):
            return {}
        return {url: version for url, version in found.items() if isinstance(version, str)}

    def get(self, url: str) -> DockerApiVersion | None:
        """The version ``url`` last spoke, if noted (and one)."""
        try:
            return DockerApiVersion.parse(self._read()[url])
        except (KeyError, WorkloadError):
            return None

    def note(self, url: str, version: DockerApiVersion) -> None:
        """Note that ``url`` speaks ``version`` (atomically; nothing where it cannot)."""
        known = self._read()
        if known.get(url) == str(version):
            return
        known[url] = str(version)
        spare = self.path.with_name(f".{self.FILE}.{os.getpid()}")
        try:
            spare.write_text(json.dumps(known, sort_keys=True), encoding="utf-8")
            spare.replace(self.path)
        except OSError as exc:
            log.debug("cannot note the engine's API version in %s: %s", self.path, exc)
            spare.unlink(missing_ok=True)


class DockerEngine:
    """An ``aiodocker`` client for one engine address, opened lazily, errors translated;
    ``known``: where the API version it last spoke is noted, if anywhere."""

    def __init__(self, url: str | None = None, known: KnownVersions | None = None) -> None:
        self.url = docker_host(url)
        self._known = known
        self._client: aiodocker.Docker | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
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
        (404 for a container that is gone) catch ``aiodocker.DockerError`` inside this block.
        """
        try:
            yield
        except aiodocker.DockerError as exc:
            if exc.status == 900:  # aiodocker's code for "could not connect"
                raise self.unreachable(exc) from None
            msg = f"Docker engine at {self.url}: {doing} failed: {exc.message}"
            raise WorkloadError(msg) from None
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            # ValueError: aiodocker refuses an address it cannot parse
            raise self.unreachable(exc) from None

    async def client(self) -> aiodocker.Docker:
        """The client for the running event loop, pinned to the engine's API version."""
        loop = asyncio.get_running_loop()
        if self._client is not None and self._loop is loop:
            return self._client
        if self._client is not None:
            self._client = None  # made in another (finished) loop; its session cannot be reused
        timeout = aiohttp.ClientTimeout(total=_CALL_TIMEOUT_S, sock_connect=_CONNECT_TIMEOUT_S)
        # an engine whose facts are known is spoken to at its version without asking again
        pinned = "auto" if self._facts is None else f"v{self._facts.api_version}"
        with self.errors("connecting"):
            client = aiodocker.Docker(url=self.url, timeout=timeout, api_version=pinned)
        self._client, self._loop = client, loop
        return client

    def learn(self, other: DockerEngine) -> None:
        """Take what ``other``, a connection to the same engine, was told, where this one was
        told nothing yet (its client then speaks the engine's version without asking)."""
        if self._facts is not None or other._facts is None:
            return
        self._facts = other._facts
        if self._client is not None and self._client.api_version == "auto":
            self._client.api_version = f"v{self._facts.api_version}"

    async def facts(self) -> EngineFacts:
        """Ask the engine once for its API version and CDI support."""
        if self._facts is not None:
            return self._facts
        client = await self.client()
        with self.errors("asking its version"):
            facts = await self._ask_at_known(client)
            if facts is None:
                version, info = await asyncio.gather(client.version(), client.system.info())
                facts = EngineFacts.from_engine(version, info)
                if self._known is not None and facts.supported:
                    self._known.note(self.url, facts.api_version)
        if not facts.supported:
            msg = (
                f"the Docker engine at {self.url} ({facts.product}) speaks API "
                f"{facts.api_version}; accelkit needs {MIN_API_VERSION} or newer"
            )
            raise RuntimeUnavailable(msg)
        self._facts = facts
        return facts

    async def _ask_at_known(self, client: aiodocker.Docker) -> EngineFacts | None:
        """The engine's answers, asked at the version it last spoke (one round trip); ``None``
        where none is known, or the engine refuses it or speaks another now."""
        known = None if self._known is None else self._known.get(self.url)
        if known is None or client.api_version != "auto":
            return None
        client.api_version = f"v{known}"
        answers: list[Mapping[str, Any]] = []
        try:
            answers = await asyncio.gather(client.version(), client.system.info())
        except aiodocker.DockerError as exc:
            if exc.status == 900:  # not there at all: no second question
                raise
        facts = EngineFacts.from_engine(*answers) if answers else None
        if facts is None or facts.api_version != known:
            client.api_version = "auto"  # asked again the long way, and noted
            return None
        return facts

    async def close(self) -> None:
        """Close the client's session (only in the loop that opened it)."""
        client, self._client = self._client, None
        if client is not None and self._loop is asyncio.get_running_loop():
            await client.close()
