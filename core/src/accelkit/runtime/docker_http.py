"""The Docker Engine API spoken over the engine's socket with asyncio streams alone.

The docker runtime's calls are a dozen plain HTTP/1.1 requests with JSON bodies and one
attached output stream. An HTTP client library (aiohttp, what ``aiodocker`` uses) costs more to
import than ``docker run --rm`` takes to run a container, so each request here is one
connection (``Connection: close``) to ``unix://PATH`` or ``tcp://HOST:PORT``, written and read
with what asyncio already has. Answers with ``Content-Length``, chunked answers and answers
that end with the connection are all read. An engine's error status is an
:class:`EngineRefused` with the engine's message; a connection that fails is the ``OSError``
(or ``TimeoutError``) it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

__all__ = ["EngineClient", "EngineRefused", "OutputFrames"]

#: the head of a multiplexed output frame: the stream (1 stdout, 2 stderr), 3 zeros, the size
_FRAME = struct.Struct(">BxxxL")
_HEAD_LIMIT = 64 * 1024


class EngineRefused(Exception):
    """The engine answered with an error status; ``message`` is what it said."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(status, message)
        self.status = status
        self.message = message

    def __str__(self) -> str:
        return f"{self.status}: {self.message}"


class OutputFrames:
    """An attached container's output: ``(stream, bytes)`` frames until it ends."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    async def read(self) -> tuple[int, bytes] | None:
        """The next frame, or ``None`` once the container's streams closed."""
        try:
            head = await self._reader.readexactly(_FRAME.size)
            stream, size = _FRAME.unpack(head)
            return stream, await self._reader.readexactly(size)
        except asyncio.IncompleteReadError:
            return None

    def close(self) -> None:
        """Close the connection."""
        self._writer.close()


class EngineClient:
    """Requests to one engine address; see the module docstring."""

    def __init__(self, url: str, *, connect_timeout: float, call_timeout: float) -> None:
        self.url = url
        self._connect_timeout = connect_timeout
        self._call_timeout = call_timeout
        parts = urlsplit(url)
        if parts.scheme == "unix" and (parts.path or parts.netloc):
            self._path: str | None = parts.path or parts.netloc
            self._host, self._port = "", 0
        elif parts.scheme in ("tcp", "http") and parts.hostname:
            self._path = None
            self._host, self._port = parts.hostname, parts.port or 2375
        else:
            msg = f"not an engine address accelkit can reach: {url!r} (unix:// or tcp://)"
            raise ValueError(msg)

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        async with asyncio.timeout(self._connect_timeout):
            if self._path is not None:
                return await asyncio.open_unix_connection(self._path, limit=_HEAD_LIMIT * 16)
            return await asyncio.open_connection(self._host, self._port, limit=_HEAD_LIMIT * 16)

    @staticmethod
    def _target(path: str, params: Mapping[str, Any] | None) -> str:
        query = {
            k: ("1" if v is True else "0" if v is False else str(v))
            for k, v in (params or {}).items()
            if v is not None
        }
        return quote(path) + (f"?{urlencode(query)}" if query else "")

    @contextlib.asynccontextmanager
    async def _exchange(
        self,
        method: str,
        path: str,
        params: Mapping[str, Any] | None,
        body: Any,
        extra: str = "",
    ) -> AsyncIterator[tuple[int, dict[str, str], asyncio.StreamReader, asyncio.StreamWriter]]:
        reader, writer = await self._open()
        try:
            data = b"" if body is None else json.dumps(body).encode()
            head = (
                f"{method} {self._target(path, params)} HTTP/1.1\r\nHost: docker\r\n"
                f"User-Agent: accelkit\r\n{extra}"
                + (f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n")
                + "\r\n"
            )
            writer.write(head.encode("latin-1") + data)
            await writer.drain()
            status, headers = await _read_head(reader)
            yield status, headers, reader, writer
        finally:
            writer.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        timed: bool = True,
    ) -> Any:
        """The engine's JSON answer (``None`` for an empty one); :class:`EngineRefused` for
        an error status. ``timed=False`` waits as long as the engine takes (a container's
        wait)."""
        limit = self._call_timeout if timed else None
        async with asyncio.timeout(limit):
            extra = "Connection: close\r\n"
            async with self._exchange(method, path, params, body, extra) as exchange:
                status, headers, reader, _writer = exchange
                data = await _read_body(reader, headers)
        if status >= 400:
            raise EngineRefused(status, _message(data))
        if not data.strip():
            return None
        return json.loads(data)

    async def attach(self, ident: str) -> OutputFrames:
        """The container's stdout and stderr from now on (attach before it starts)."""
        reader, writer = await self._open()
        try:
            target = self._target(
                f"/containers/{ident}/attach", {"stream": True, "stdout": True, "stderr": True}
            )
            writer.write(
                f"POST {target} HTTP/1.1\r\nHost: docker\r\nUser-Agent: accelkit\r\n"
                "Connection: Upgrade\r\nUpgrade: tcp\r\nContent-Length: 0\r\n\r\n".encode()
            )
            await writer.drain()
            async with asyncio.timeout(self._call_timeout):
                status, headers = await _read_head(reader)
            if status >= 400:
                raise EngineRefused(status, _message(await _read_body(reader, headers)))
        except BaseException:
            writer.close()
            raise
        return OutputFrames(reader, writer)


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    """The status and the headers (names in lower case) of an answer."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        msg = "the engine closed the connection without an answer"
        raise ConnectionResetError(msg) from exc
    except asyncio.LimitOverrunError as exc:
        msg = "the engine's answer has an oversized head"
        raise ConnectionResetError(msg) from exc
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        msg = f"not an HTTP answer: {lines[0][:100]!r}"
        raise ConnectionResetError(msg)
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers


async def _read_body(reader: asyncio.StreamReader, headers: Mapping[str, str]) -> bytes:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        chunks: list[bytes] = []
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                with contextlib.suppress(asyncio.IncompleteReadError):
                    await reader.readuntil(b"\r\n")  # the trailer's end
                return b"".join(chunks)
            chunks.append(await reader.readexactly(size))
            await reader.readexactly(2)
    if (length := headers.get("content-length")) is not None:
        return await reader.readexactly(int(length))
    return await reader.read()


def _message(data: bytes) -> str:
    """The engine's ``{"message": ...}``, else its text."""
    try:
        said = json.loads(data)
    except ValueError:
        return data.decode("utf-8", "replace").strip()
    if isinstance(said, dict) and "message" in said:
        return str(said["message"])
    return data.decode("utf-8", "replace").strip()
