"""Running one workload of a process runtime to its end, as the runtime tests do."""

from __future__ import annotations

import os

from accelkit.runtime import LaunchSpec, WorkloadHandle
from accelkit.runtime.process import ProcessRuntime
from accelkit.types import AgentId, WorkloadConfig

AGENT = AgentId("agent-1")


async def run_to_end(
    runtime: ProcessRuntime, argv: list[str], agent: AgentId = AGENT
) -> WorkloadHandle:
    """Run ``argv`` to its end (it must exit 0) as a workload of ``runtime``; its handle."""
    workload = await runtime.new_workload(agent)
    spec = LaunchSpec(agent, workload, argv, WorkloadConfig(), base_env=os.environ)
    handle = await runtime.create(spec)
    try:
        await runtime.start(handle)
        assert await runtime.wait(handle) == 0
    finally:
        await runtime.stop(handle, 0)
    return handle
