"""The ``accelkit/<agent>`` cgroup levels: removed with a process's only workload, left between
the workloads of a process that runs more (making them again costs more than the workload's own
groups) and removed when its runtime closes."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from accelkit.cgroup import CgroupFS
from accelkit.runtime import WorkloadHandle
from accelkit.runtime.process import ProcessRuntime
from accelkit.types import AgentId

from .workload_runs import run_to_end

pytestmark = [
    pytest.mark.slow,  # real processes, real cgroups
    pytest.mark.skipif(os.geteuid() != 0, reason="the process runtime's cgroups need root"),
    pytest.mark.skipif(
        CgroupFS.read().process_directory("memory") is None, reason="no memory cgroup here"
    ),
]

#: an agent of this test alone: tests running beside it use the levels of theirs
AGENT = AgentId(f"agent-levels-{os.getpid()}")


def _groups(handle: WorkloadHandle) -> list[Path]:
    return [Path(v) for k, v in handle.details.items() if k.startswith("cgroup.") and "/" in v]


def test_levels_go_with_a_single_workload_and_stay_between_more_until_close():
    async def main() -> tuple[list[Path], list[Path], list[bool], list[bool], list[bool]]:
        runtime = ProcessRuntime()
        try:
            first = _groups(await run_to_end(runtime, ["true"], AGENT))
            after_one = [group.parent.exists() for group in first]
            second = _groups(await run_to_end(runtime, ["true"], AGENT))
            after_two = [group.parent.exists() for group in second]
        finally:
            await runtime.close()
        return first, second, after_one, after_two, [g.parent.exists() for g in second]

    first, second, after_one, after_two, after_close = asyncio.run(main())
    assert first, "no cgroup was made"
    assert not any(after_one)  # one workload: as accelkit run leaves it, nothing
    assert all(after_two)  # the agent's levels, for the next workload
    assert not any(group.exists() for group in first + second)  # the groups themselves go
    assert not any(after_close)
