"""A record whose runtime is not installed keeps its devices and is named (DESIGN §18, §14).

Only its runtime can tell whether such a workload still runs (a process-tree workload of an
agent program's own runtime has no leader the ledger could ask): it is never judged dead, its
devices are never granted again, and only ``release --force`` frees them.
"""

from __future__ import annotations

import asyncio
import os
from decimal import Decimal

import pytest

from accelkit.config import load_host_config
from accelkit.errors import InsufficientResource, WorkloadError
from accelkit.events import WorkloadPhase
from accelkit.node import Node
from accelkit.runtime.base import WorkloadHandle
from accelkit.types import AgentId, DeviceName, SlotName, Workload
from accelkit.workload import Ledger, LedgerRecord, ProcessStamp

AGENT = AgentId("agent-1")
CUDA = DeviceName("cuda")
GONE_OWNER = ProcessStamp(os.getpid(), "1")  # our pid, another start time: not running


def record_of_a_missing_runtime() -> LedgerRecord:
    handle = WorkloadHandle("vanished", "job-7", {"where": "an agent program's own runtime"})
    return LedgerRecord(
        AGENT,
        Workload.process_tree("job-7"),
        {CUDA: {SlotName("cuda.device"): {"cuda0": Decimal(1)}}},
        (CUDA,),
        owner=GONE_OWNER,
        handle=handle,
    ).with_phase(CUDA, WorkloadPhase.PRE_CREATE)


def test_it_is_kept_named_and_never_granted_again(mock_node):
    config = load_host_config(mock_node(gpus=1))
    Ledger(config.resource.state_dir).write(record_of_a_missing_runtime())

    async def main():
        async with Node.open(config) as node:
            opened = node.last_report
            with pytest.raises(InsufficientResource, match="job-7"):
                await node.book(AGENT, Workload.process_tree("next"), {"cuda.device": 1})
            shown = await node.status()
            with pytest.raises(WorkloadError, match="--force"):
                await node.release("job-7")
            return opened, shown

    report, [shown] = asyncio.run(main())
    assert any(
        "workload 'job-7'" in p
        and "its runtime 'vanished' is not installed here" in p
        and "its devices stay booked" in p
        for p in report.problems
    ), report.problems
    assert report.torn_down == ()
    assert (shown.workload_id, shown.liveness) == ("job-7", "unknown")
    assert list(Ledger(config.resource.state_dir).read_all()) == [(AGENT, "job-7")]


def test_release_force_frees_it(mock_node):
    config = load_host_config(mock_node(gpus=1))
    Ledger(config.resource.state_dir).write(record_of_a_missing_runtime())
    skipped: list[str] = []

    async def main():
        async with Node.open(config) as node:
            await node.release("job-7", force=True, on_skip=skipped.append)
            return await node.book(AGENT, Workload.process_tree("next"), {"cuda.device": 1})

    booked = asyncio.run(main())
    assert booked.allocation[CUDA]["cuda.device"] == {"cuda0": 1}
    assert skipped == ["stopping the workload (runtime 'vanished' cannot tell whether it runs)"]
