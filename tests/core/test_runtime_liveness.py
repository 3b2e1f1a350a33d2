"""Liveness through the runtimes: a record's handle asks its runtime whether the workload runs,
outside the ledger's transaction; a gone workload's leftovers are removed through the runtime
before its teardown is finished; ``release`` stops a live one through it."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from decimal import Decimal
from typing import ClassVar

import pytest

from accelkit.config import load_host_config
from accelkit.events import WorkloadPhase
from accelkit.node import Node
from accelkit.runtime import LaunchSpec, Runtime, WorkloadHandle
from accelkit.types import AgentId, DeviceName, SlotName, Workload, WorkloadType
from accelkit.workload import Ledger, LedgerRecord, ProcessStamp

AGENT = AgentId("agent-1")
CUDA = DeviceName("cuda")
DEAD = ProcessStamp(os.getpid(), "1")

PROBE = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], timeout=0.2, isolation_level=None)
try:
    db.execute("BEGIN IMMEDIATE")
except sqlite3.OperationalError:
    sys.exit(3)
sys.exit(0)
"""


class PidRuntime(Runtime):
    """A runtime whose handle names a real process: alive while it runs, stopped by signals."""

    name: ClassVar[str] = "pids"
    workload_type: ClassVar[WorkloadType] = WorkloadType.PROCESS_TREE

    def __init__(self, *, answer: bool | None = None, probe: str | None = None) -> None:
        self.answer = answer  # None: ask the process; else always this
        self.unknown = False
        self.probe = probe  # a database another process must be able to write meanwhile
        self.probes: list[int] = []
        self.stops: list[tuple[str, float]] = []

    async def new_workload(self, agent_id: AgentId) -> Workload:
        raise NotImplementedError

    async def create(self, spec: LaunchSpec) -> WorkloadHandle:
        raise NotImplementedError

    async def start(self, handle: WorkloadHandle) -> None:
        raise NotImplementedError

    async def wait(self, handle: WorkloadHandle) -> int:
        raise NotImplementedError

    async def signal(self, handle: WorkloadHandle, signum: int) -> None:
        os.kill(int(handle.ident), signum)

    async def stop(self, handle: WorkloadHandle, grace: float) -> None:
        self.stops.append((handle.ident, grace))
        try:
            os.kill(int(handle.ident), signal.SIGKILL)
        except ProcessLookupError:
            return

    async def discard(self, workload: Workload, handle: WorkloadHandle | None) -> None:
        return None

    async def is_alive(self, handle: WorkloadHandle) -> bool | None:
        if self.probe is not None:
            code = subprocess.run([sys.executable, "-c", PROBE, self.probe], check=False)
            self.probes.append(code.returncode)
        if self.unknown:
            return None
        stamp = ProcessStamp(int(handle.ident), handle.details["start_time"])
        return stamp.is_running() if self.answer is None else self.answer


@pytest.fixture
def config(mock_node):
    return load_host_config(mock_node(gpus=2))


@pytest.fixture
def sleeper():
    proc = subprocess.Popen(["sleep", "600"])
    yield proc
    proc.kill()
    proc.wait()


def contained(proc: subprocess.Popen[bytes], workload_id: str = "job") -> LedgerRecord:
    stamp = ProcessStamp.of(proc.pid)
    assert stamp is not None
    handle = WorkloadHandle("pids", str(proc.pid), {"start_time": stamp.start_time})
    return LedgerRecord(
        AGENT,
        Workload.process_tree(workload_id),
        {CUDA: {SlotName("cuda.device"): {"cuda0": Decimal(1)}}},
        (CUDA,),
        owner=DEAD,
        handle=handle,
    ).with_phase(CUDA, WorkloadPhase.PRE_CREATE)


def gpus(node) -> dict:
    allocs = node.agents[AGENT].contexts[CUDA].alloc_map.allocations["cuda.device"]
    return {d: a for d, a in allocs.items() if a}


def open_node(config, runtime):
    async def main():
        async with Node.open(config, runtimes={"pids": runtime}) as node:
            return node.last_report, gpus(node), await node.status()

    return asyncio.run(main())


def test_a_workload_its_runtime_says_runs_keeps_its_devices(config, sleeper):
    Ledger(config.resource.state_dir).write(contained(sleeper))
    runtime = PidRuntime()
    report, held, [shown] = open_node(config, runtime)
    assert [k[1] for k in report.kept] == ["job"]
    assert held == {"cuda0": 1}
    assert (shown.runtime, shown.handle, shown.liveness) == ("pids", str(sleeper.pid), "running")
    assert runtime.stops == []


def test_a_workload_its_runtime_says_is_gone_is_cleaned_up_then_torn_down(config, sleeper):
    Ledger(config.resource.state_dir).write(contained(sleeper))
    runtime = PidRuntime(answer=False)
    report, held, shown = open_node(config, runtime)
    assert runtime.stops == [(str(sleeper.pid), 0.0)]  # leftovers removed first
    assert [t.post_terminated for t in report.torn_down] == [("cuda",)]
    assert held == {}
    assert shown == []
    assert sleeper.wait(timeout=10) == -signal.SIGKILL


def test_a_runtime_that_cannot_tell_keeps_the_record_and_says_so(config, sleeper):
    Ledger(config.resource.state_dir).write(contained(sleeper))
    runtime = PidRuntime()
    runtime.unknown = True
    report, held, [shown] = open_node(config, runtime)
    assert "cannot tell whether workload 'job' is alive" in "\n".join(report.problems)
    assert held == {"cuda0": 1}
    assert shown.liveness == "unknown"


def test_liveness_is_asked_outside_the_ledger_transaction(config, sleeper):
    Ledger(config.resource.state_dir).write(contained(sleeper))
    runtime = PidRuntime(probe=str(config.resource.state_dir / "ledger.db"))
    open_node(config, runtime)
    assert runtime.probes  # another process could write the ledger while the runtime answered
    assert set(runtime.probes) == {0}


def test_release_stops_a_live_workload_through_its_runtime(config, sleeper):
    Ledger(config.resource.state_dir).write(contained(sleeper))
    runtime = PidRuntime()

    async def main():
        async with Node.open(config, runtimes={"pids": runtime}) as node:
            report = await node.release("job", grace=2.5)
            return report, gpus(node)

    report, held = asyncio.run(main())
    assert report.stopped
    assert report.post_terminated == ("cuda",)
    assert (str(sleeper.pid), 2.5) in runtime.stops
    assert held == {}
    assert sleeper.wait(timeout=10) == -signal.SIGKILL
    assert Ledger(config.resource.state_dir).read_all() == {}
