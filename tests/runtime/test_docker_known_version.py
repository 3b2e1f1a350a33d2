"""The API version a ledger knows each engine by: a docker run asks an engine it ran on before
in one round trip, and a version the engine no longer speaks costs only the long way.

The session's dockerd is reached through a recording proxy (a unix socket that passes every
byte on and notes each request line), so the test sees what the engine was asked.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from accelkit.runtime.base import WorkloadHandle
from accelkit.runtime.docker import DockerRuntime, engine_ahead
from accelkit.runtime.docker_engine import KnownVersions

from .test_docker import launch, run

if TYPE_CHECKING:
    from .conftest import Engine

pytestmark = pytest.mark.slow

_REQUEST = re.compile(rb"(?:^|\r\n)(GET|POST|DELETE|HEAD|PUT) (\S+) HTTP/1\.1\r\n")


@contextlib.asynccontextmanager
async def recording_proxy(engine: Engine, sock: Path) -> AsyncIterator[list[str]]:
    """A unix socket at ``sock`` in front of ``engine``; the requests sent through it."""
    target = engine.url.removeprefix("unix://")
    asked: list[str] = []

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, note: bool) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                if note:
                    asked.extend(
                        f"{m[1].decode()} {m[2].decode()}" for m in _REQUEST.finditer(data)
                    )
                writer.write(data)
                await writer.drain()
        with contextlib.suppress(OSError):
            writer.write_eof()

    async def serve(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        engine_r, engine_w = await asyncio.open_unix_connection(target)
        try:
            await asyncio.gather(pipe(client_r, engine_w, True), pipe(engine_r, client_w, False))
        finally:
            engine_w.close()
            client_w.close()

    server = await asyncio.start_unix_server(serve, str(sock))
    try:
        yield asked
    finally:
        server.close()


def engine_version(engine: Engine) -> str:
    return engine.run_cli("version", "--format", "{{.Server.APIVersion}}").strip()


async def run_once(engine: Engine, proxy: str, state: Path) -> None:
    runtime = DockerRuntime(proxy, output=None)
    try:
        async with engine_ahead(proxy, state_dir=state):
            handle = await launch(runtime, engine, "true")
            assert await runtime.wait(handle) == 0
            await runtime.stop(handle, 0)
    finally:
        await runtime.close()


def facts_asked(asked: list[str]) -> list[str]:
    """The questions about the engine itself, in a stable order."""
    return sorted(line for line in asked if line.endswith(("/version", "/info")))


def test_an_engine_run_on_before_is_asked_in_one_round_trip(
    dockerd: Engine, tmp_path: Path
) -> None:
    version = engine_version(dockerd)
    proxy = f"unix://{tmp_path}/proxy.sock"

    async def scenario() -> tuple[list[str], list[str]]:
        async with recording_proxy(dockerd, tmp_path / "proxy.sock") as asked:
            await run_once(dockerd, proxy, tmp_path)
            first = list(asked)
            asked.clear()
            await run_once(dockerd, proxy, tmp_path)
            return first, list(asked)

    first, second = run(scenario())
    assert "GET /version" in first  # the long way: which version to speak, then the questions
    assert json.loads((tmp_path / KnownVersions.FILE).read_text()) == {proxy: version}
    assert facts_asked(second) == [f"GET /v{version}/info", f"GET /v{version}/version"]


def test_a_runtime_that_spoke_to_the_engine_first_is_told_what_was_asked_ahead(
    dockerd: Engine, tmp_path: Path
) -> None:
    version = engine_version(dockerd)
    proxy = f"unix://{tmp_path}/proxy.sock"
    (tmp_path / KnownVersions.FILE).write_text(json.dumps({proxy: version}))
    gone = WorkloadHandle("docker", "0" * 64, {"name": "accelkit-gone", "engine": proxy})

    async def scenario() -> list[str]:
        async with recording_proxy(dockerd, tmp_path / "proxy.sock") as asked:
            runtime = DockerRuntime(proxy, output=None)
            try:
                async with engine_ahead(proxy, state_dir=tmp_path):
                    # as a reconciliation asks about a recorded container before the create
                    assert await runtime.is_alive(gone) is False
                    handle = await launch(runtime, dockerd, "true")
                    assert await runtime.wait(handle) == 0
                    await runtime.stop(handle, 0)
            finally:
                await runtime.close()
            return list(asked)

    asked = run(scenario())
    assert asked.count(f"GET /v{version}/version") == 1
    assert asked.count(f"GET /v{version}/info") == 1


@pytest.mark.parametrize(
    "noted",
    [
        '{"URL": "1.99"}',  # newer than the engine speaks: it refuses to answer
        '{"URL": "1.40"}',  # older: it answers, with its own, newer version
        '{"URL": "../../containers/json?"}',
        '{"URL": 141}',
        "not json",
        "[]",
    ],
    ids=["newer", "older", "not-a-version", "not-a-string", "not-json", "not-a-table"],
)
def test_a_version_the_engine_does_not_speak_is_asked_the_long_way_and_noted(
    dockerd: Engine, tmp_path: Path, noted: str
) -> None:
    version = engine_version(dockerd)
    proxy = f"unix://{tmp_path}/proxy.sock"
    known = tmp_path / KnownVersions.FILE
    known.write_text(noted.replace("URL", proxy))

    async def scenario() -> list[str]:
        async with recording_proxy(dockerd, tmp_path / "proxy.sock") as asked:
            await run_once(dockerd, proxy, tmp_path)
            return list(asked)

    asked = run(scenario())
    assert "GET /version" in asked
    assert not any("containers/json" in line for line in asked)
    assert json.loads(known.read_text()) == {proxy: version}


def test_a_state_directory_that_cannot_be_written_only_costs_the_long_way(
    dockerd: Engine, tmp_path: Path
) -> None:
    missing = tmp_path / "not-made-yet"
    run(run_once(dockerd, dockerd.url, missing))
    assert not missing.exists()
