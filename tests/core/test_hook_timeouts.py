"""Hooks under ``[plugins] hook-timeout``: a hung hook fails a creation or leaves a recorded,
retried teardown, and never holds up the node, later bookings or ``status``."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from decimal import Decimal

import pytest

from accelkit.config import load_host_config
from accelkit.errors import PluginTimeout, WorkloadError
from accelkit.events import WorkloadPhase
from accelkit.node import Node
from accelkit.types import AgentId, DeviceName, SlotName, Workload
from accelkit.workload import Ledger, LedgerRecord, ProcessStamp
from accelkit_mock.plugin import MockLifecycleHook

AGENT = AgentId("agent-1")
CUDA = DeviceName("cuda")
ONE_GPU = {SlotName("cuda.device"): Decimal(1)}
DEAD = ProcessStamp(os.getpid(), "1")
LIMIT = 0.3


@pytest.fixture
def config(mock_node):
    path = mock_node(gpus=2)
    path.write_text(path.read_text().replace("[plugins]\n", f"[plugins]\nhook-timeout = {LIMIT}\n"))
    return load_host_config(path)


@pytest.fixture
def calls(monkeypatch):
    """Count the hooks' calls; the phases in ``hang`` never return."""
    seen: list[tuple[str, str]] = []
    hang: set[str] = set()

    def patched(phase, original):
        async def hook(self):
            seen.append((self.key, phase))
            if phase in hang:
                await asyncio.sleep(3600)
            return await original(self)

        return hook

    for phase in ("pre_create", "post_create", "pre_terminate", "post_terminate"):
        monkeypatch.setattr(
            MockLifecycleHook, phase, patched(phase, getattr(MockLifecycleHook, phase))
        )
    return (seen, hang)


def dead_record(workload_id: str = "dead", device: str = "cuda0") -> LedgerRecord:
    return LedgerRecord(
        AGENT,
        Workload.process_tree(workload_id),
        {CUDA: {SlotName("cuda.device"): {device: Decimal(1)}}},
        (CUDA,),
        owner=DEAD,
        leader=DEAD,
    ).with_phase(CUDA, WorkloadPhase.PRE_CREATE)


def gpus(node) -> dict:
    allocs = node.agents[AGENT].contexts[CUDA].alloc_map.allocations["cuda.device"]
    return {d: a for d, a in allocs.items() if a}


def test_a_hung_post_terminate_of_a_dead_workload_is_recorded_and_holds_up_nothing(config, calls):
    seen, hang = calls
    hang.add("post_terminate")
    ledger = Ledger(config.resource.state_dir)
    ledger.write(dead_record())

    async def first():
        start = time.monotonic()
        async with Node.open(config) as node:
            opened = time.monotonic() - start
            [torn] = node.last_report.torn_down
            assert not torn.freed
            assert torn.unfinished == ("cuda",)
            assert "timed out after 0.3 s in post_terminate" in "\n".join(torn.errors)
            assert "is unfinished" in "\n".join(node.last_report.messages())
            assert gpus(node) == {"cuda0": 1}  # its device stays taken
            other = await node.book(AGENT, Workload.process_tree("new"), ONE_GPU)
            assert other.allocation[CUDA]["cuda.device"] == {"cuda1": 1}
            return opened

    assert asyncio.run(first()) < LIMIT + 5
    record = ledger.read(AGENT, "dead")
    assert record is not None
    assert record.owner is None
    assert record.unfinished() == ("cuda:post_terminate",)
    assert record.attempts == 1
    assert record.retry_after is not None
    assert float(record.retry_after) > time.time() + 30
    tries = seen.count(("cuda", "post_terminate"))

    async def later():
        start = time.monotonic()
        async with Node.open(config) as node:
            [shown] = [s for s in await node.status() if s.workload_id == "dead"]
            return time.monotonic() - start, shown, gpus(node)

    took, shown, held = asyncio.run(later())
    assert took < LIMIT  # the hung hook is not tried again before its time
    assert seen.count(("cuda", "post_terminate")) == tries
    assert shown.unfinished == ("cuda:post_terminate",)
    assert held == {"cuda0": 1, "cuda1": 1}


def test_a_retry_that_succeeds_frees_the_devices(config, calls):
    ledger = Ledger(config.resource.state_dir)
    record = dead_record().with_started(CUDA, WorkloadPhase.POST_TERMINATE)
    ledger.write(LedgerRecord.from_json({**record.to_json(), "owner": None}))

    async def main():
        async with Node.open(config) as node:
            return node.last_report, gpus(node)

    report, held = asyncio.run(main())
    assert [t.freed for t in report.torn_down] == [True]
    assert held == {}
    assert ledger.read_all() == {}
    assert calls[0] == [("cuda", "post_terminate")]


def test_release_force_frees_a_workload_whose_post_terminate_hangs(config, calls):
    _seen, hang = calls
    hang.add("post_terminate")
    Ledger(config.resource.state_dir).write(dead_record())

    async def main():
        async with Node.open(config) as node:
            report = await node.release("dead", force=True)
            return report, gpus(node)

    report, held = asyncio.run(main())
    assert report.skipped == ("post_terminate of plugin 'cuda' (timed out)",)
    assert held == {}
    assert Ledger(config.resource.state_dir).read_all() == {}


def test_release_without_force_says_the_teardown_is_unfinished(config, calls):
    calls[1].add("post_terminate")
    Ledger(config.resource.state_dir).write(dead_record())

    async def main():
        async with Node.open(config) as node:
            await node.release("dead")

    with pytest.raises(WorkloadError, match=r"teardown is unfinished.*'--force' frees them"):
        asyncio.run(main())


def test_a_hung_pre_create_fails_the_creation_and_still_gets_post_terminate(config, calls):
    seen, hang = calls
    hang.add("pre_create")

    async def main():
        async with Node.open(config) as node:
            record = await node.book(AGENT, Workload.process_tree("w"), ONE_GPU)
            with pytest.raises(PluginTimeout, match=r"'cuda' timed out after 0\.3 s in pre_create"):
                await node.lifecycle(record).prepare()
            return gpus(node)

    assert asyncio.run(main()) == {}
    assert seen == [("cuda", "pre_create"), ("cuda", "post_terminate")]
    assert Ledger(config.resource.state_dir).read_all() == {}


def test_a_hung_post_terminate_of_a_managed_workload_is_given_up_and_retried(config, calls):
    seen, hang = calls
    hang.add("post_terminate")

    async def main():
        async with Node.open(config) as node:
            record = await node.book(AGENT, Workload.process_tree("w"), ONE_GPU)
            driver = node.lifecycle(record)
            await driver.prepare()
            await driver.post_create()
            with pytest.raises(WorkloadError, match="timed out"):
                await driver.terminate()
            return gpus(node)

    assert asyncio.run(main()) == {"cuda0": 1}  # not freed: its teardown is unfinished
    left = Ledger(config.resource.state_dir).read(AGENT, "w")
    assert left is not None
    assert left.owner is None
    assert left.unfinished() == ("cuda:post_terminate",)
    hang.clear()

    async def again():
        async with Node.open(config) as node:
            return node.last_report, gpus(node)

    report, held = asyncio.run(again())
    assert [t.post_terminated for t in report.torn_down] == [("cuda",)]
    assert held == {}
    assert seen.count(("cuda", "post_terminate")) == 2


def test_a_create_lifecycle_hook_that_blocks_fails_the_creation_at_the_limit(config, monkeypatch):
    from accelkit_mock.plugin import MockPlugin

    released = threading.Event()
    original = MockPlugin.create_lifecycle_hook

    def blocking(self, workload, device_alloc, devices):
        if self.key == "cuda":
            released.wait(3600)  # blocks the plugin's worker, not the node
        return original(self, workload, device_alloc, devices)

    monkeypatch.setattr(MockPlugin, "create_lifecycle_hook", blocking)

    async def main():
        async with Node.open(config) as node:
            record = await node.book(AGENT, Workload.process_tree("w"), ONE_GPU)
            with pytest.raises(
                PluginTimeout, match=r"'cuda' timed out after 0\.3 s in create_lifecycle_hook"
            ):
                await node.lifecycle(record).prepare()
            return gpus(node)

    try:
        assert asyncio.run(main()) == {}  # nothing was asked of the hook: freed at once
    finally:
        released.set()
    assert Ledger(config.resource.state_dir).read_all() == {}
