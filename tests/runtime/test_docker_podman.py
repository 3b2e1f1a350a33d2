"""The docker runtime against podman's Docker-compatible API; skips where podman cannot run."""

from __future__ import annotations

import asyncio
import io
import signal
from typing import TYPE_CHECKING

import pytest

from accelkit.runtime.base import LaunchSpec, RuntimeUnavailable
from accelkit.runtime.docker import DockerRuntime, OutputTarget
from accelkit.types import AgentId, WorkloadConfig

if TYPE_CHECKING:
    from .conftest import Engine

AGENT = AgentId("podman-agent")
pytestmark = pytest.mark.slow


def test_create_start_wait_and_stop_through_podman(podman_service: Engine) -> None:
    stdout, stderr = io.BytesIO(), io.BytesIO()
    config = WorkloadConfig(env_vars={"ACCEL_VISIBLE": "0"}, memory_limit=64 * 1024 * 1024)
    limit = "/sys/fs/cgroup/memory/memory.limit_in_bytes"
    script = f"echo env=$ACCEL_VISIBLE; cat {limit}; echo e >&2; exit 4"

    async def scenario() -> list[object]:
        runtime = DockerRuntime(podman_service.url, output=OutputTarget(stdout, stderr))
        try:
            workload = await runtime.new_workload(AGENT)
            spec = LaunchSpec(
                AGENT,
                workload,
                ["sh", "-c", script],
                config,
                ledger_key="k1",
                image=podman_service.image,
            )
            handle = await runtime.create(spec)
            await runtime.start(handle)
            status = await runtime.wait(handle)
            listed = [(r.workload_id, r.ledger_key) for r in await runtime.containers(AGENT)]
            await runtime.stop(handle, 0)
            return [status, listed, await runtime.is_alive(handle)]
        finally:
            await runtime.close()

    status, listed, alive = asyncio.run(scenario())
    assert status == 4
    assert stdout.getvalue() == f"env=0\n{64 * 1024 * 1024}\n".encode()
    assert stderr.getvalue() == b"e\n"
    assert len(listed) == 1
    assert listed[0][1] == "k1"
    assert alive is False


def test_stop_and_signals_through_podman(podman_service: Engine) -> None:
    async def scenario() -> tuple[bool | None, bool | None, int]:
        runtime = DockerRuntime(podman_service.url, output=None)
        try:
            workload = await runtime.new_workload(AGENT)
            argv = ["sh", "-c", "trap 'exit 9' USR1; while :; do sleep 0.1; done"]
            handle = await runtime.create(
                LaunchSpec(AGENT, workload, argv, image=podman_service.image)
            )
            await runtime.start(handle)
            alive = await DockerRuntime(podman_service.url, output=None).is_alive(handle)
            await asyncio.sleep(0.3)
            await runtime.signal(handle, signal.SIGUSR1)
            status = await runtime.wait(handle)
            await runtime.stop(handle, 1)
            return alive, await runtime.is_alive(handle), status
        finally:
            await runtime.close()

    assert asyncio.run(scenario()) == (True, False, 9)


def test_a_missing_image_through_podman(podman_service: Engine) -> None:
    async def scenario() -> None:
        runtime = DockerRuntime(podman_service.url, output=None)
        try:
            workload = await runtime.new_workload(AGENT)
            with pytest.raises(RuntimeUnavailable, match="image 'no/such:image' not found"):
                await runtime.create(LaunchSpec(AGENT, workload, ["true"], image="no/such:image"))
        finally:
            await runtime.close()

    asyncio.run(scenario())
