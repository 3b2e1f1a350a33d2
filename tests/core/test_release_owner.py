"""``release`` of a workload whose accelkit process runs: that process is asked to end it; one
that does not is an error, or, with ``force``, killed and the teardown finished here."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from decimal import Decimal

import pytest

from accelkit.config import load_host_config
from accelkit.errors import WorkloadError
from accelkit.events import WorkloadPhase
from accelkit.node import Node
from accelkit.types import AgentId, DeviceName, SlotName, Workload
from accelkit.workload import Ledger, LedgerRecord, ProcessStamp, stopping

AGENT = AgentId("agent-1")
CUDA = DeviceName("cuda")
STUBBORN = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print(1, flush=True); time.sleep(600)"
)


@pytest.fixture
def config(mock_node, monkeypatch):
    monkeypatch.setattr(stopping, "OWNER_TEARDOWN_WAIT_S", 0.3)
    return load_host_config(mock_node(gpus=1))


@pytest.fixture
def stubborn_owner():
    """An 'accelkit process' that ignores SIGTERM."""
    proc = subprocess.Popen([sys.executable, "-c", STUBBORN], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.readline()  # SIGTERM is ignored from now on
    yield proc
    proc.kill()
    proc.wait()


def record(owner: ProcessStamp) -> LedgerRecord:
    return LedgerRecord(
        AGENT,
        Workload.container("job"),
        {CUDA: {SlotName("cuda.device"): {"cuda0": Decimal(1)}}},
        (CUDA,),
        owner=owner,
    ).with_phase(CUDA, WorkloadPhase.PRE_CREATE)


def test_an_owner_that_does_not_end_its_workload_is_an_error_without_force(config, stubborn_owner):
    stamp = ProcessStamp.of(stubborn_owner.pid)
    Ledger(config.resource.state_dir).write(record(stamp))

    async def main():
        async with Node.open(config) as node:
            await node.release("job", grace=0.1)

    with pytest.raises(WorkloadError, match=r"did not end it within .*'--force' kills"):
        asyncio.run(main())
    assert stamp.is_running()
    assert list(Ledger(config.resource.state_dir).read_all()) == [(AGENT, "job")]


def test_force_kills_the_owner_and_finishes_the_teardown_saying_so_first(config, stubborn_owner):
    stamp = ProcessStamp.of(stubborn_owner.pid)
    Ledger(config.resource.state_dir).write(record(stamp))
    said: list[str] = []

    async def main():
        async with Node.open(config) as node:
            return await node.release("job", grace=0.1, force=True, on_skip=said.append)

    report = asyncio.run(main())
    assert said == [f"the teardown by accelkit process {stubborn_owner.pid}, which was killed"]
    assert report.skipped == tuple(said)
    assert report.post_terminated == ("cuda",)
    assert stubborn_owner.wait(timeout=10) < 0
    assert Ledger(config.resource.state_dir).read_all() == {}
