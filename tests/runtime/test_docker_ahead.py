"""The engine connected to ahead of the docker runtime (``engine_ahead``), as a docker run does
while its node opens and books, against the session's dockerd."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from accelkit.runtime import docker as docker_runtime
from accelkit.runtime.base import LaunchSpec, RuntimeUnavailable
from accelkit.runtime.docker import DockerRuntime, engine_ahead

from .docker_commands import accelkit
from .test_docker import AGENT, Captured, launch, run

if TYPE_CHECKING:
    from .conftest import Engine

pytestmark = pytest.mark.slow


def test_the_runtime_takes_the_engine_asked_ahead_and_keeps_it(dockerd: Engine) -> None:
    async def scenario() -> Captured:
        captured = Captured()
        runtime = DockerRuntime(dockerd.url, output=captured.target)
        try:
            async with engine_ahead(dockerd.url):
                handle = await launch(runtime, dockerd, "sh", "-c", "echo ahead")
            # the block has ended: the connection the runtime took is still its own
            assert await runtime.wait(handle) == 0
            await runtime.stop(handle, 0)
        finally:
            await runtime.close()
        return captured

    assert run(scenario()).out == "ahead\n"
    assert dockerd.run_cli("ps", "--all", "--quiet", "--filter", "label=io.accelkit.agent") == ""


def test_a_runtime_of_another_engine_is_not_given_it(dockerd: Engine, tmp_path: Path) -> None:
    async def scenario() -> None:
        runtime = DockerRuntime(dockerd.url, output=None)
        try:
            async with engine_ahead(f"unix://{tmp_path}/elsewhere.sock"):
                handle = await launch(runtime, dockerd, "true")
                assert await runtime.wait(handle) == 0
                await runtime.stop(handle, 0)
        finally:
            await runtime.close()

    run(scenario())


def open_sockets() -> int:
    """How many sockets this process holds open."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed since it was listed
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
    return count


@pytest.mark.parametrize("case", ["answered", "failed", "unanswered"])
def test_an_engine_nobody_takes_is_closed_at_the_end(
    dockerd: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture, case: str
) -> None:
    url = f"unix://{tmp_path}/no-engine.sock" if case == "failed" else dockerd.url

    async def scenario() -> None:
        async with engine_ahead(url):
            if case != "unanswered":  # the block ends once the engine answered, or failed
                await asyncio.wait((docker_runtime._AHEAD[url],))

    caplog.set_level(logging.WARNING)
    gc.collect()
    gc.disable()  # what is left open stays open; what earlier tests left is not collected now
    try:
        before = open_sockets()
        run(scenario())
        after = open_sockets()
    finally:
        gc.enable()
    assert after == before
    assert [r.getMessage() for r in caplog.records if "never retrieved" in r.getMessage()] == []
    assert url not in docker_runtime._AHEAD


def test_the_failure_found_ahead_is_the_creates(tmp_path: Path) -> None:
    url = f"unix://{tmp_path}/no-engine.sock"

    async def scenario() -> None:
        runtime = DockerRuntime(url, output=None)
        try:
            async with engine_ahead(url):
                workload = await runtime.new_workload(AGENT)
                spec = LaunchSpec(AGENT, workload, ["true"], image="busybox")
                pattern = f"^cannot reach the Docker engine at {url}: No such file or directory"
                with pytest.raises(RuntimeUnavailable, match=pattern):
                    await runtime.create(spec)
        finally:
            await runtime.close()

    run(scenario())


def test_a_docker_run_refused_at_its_booking_exits_125_cleanly(
    dockerd: Engine, tmp_path: Path
) -> None:
    config = tmp_path / "host.toml"
    config.write_text('[resource]\nreserved-cpu = 0\n[plugins]\nallowed = ["cpu", "mem"]\n')
    args = ["run", "--config", str(config), "--slots", "cpu=100000", "--runtime", "docker"]
    result = accelkit(dockerd.url, config, *args, "--image", dockerd.image, "--", "true")
    assert result.returncode == 125, result.stderr
    assert "cannot allocate on agent" in result.stderr
    assert "Traceback" not in result.stderr
    assert "Unclosed" not in result.stderr
