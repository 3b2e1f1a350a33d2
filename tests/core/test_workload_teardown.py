"""The runner's teardown always reaches post_terminate and the release; ends only its workload."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from decimal import Decimal

import psutil
import pytest

from accelkit.config import load_host_config
from accelkit.errors import InsufficientResource
from accelkit.node import Node
from accelkit.runtime import process
from accelkit.types import AgentId, SlotName
from accelkit.workload import Ledger
from accelkit.workload.runner import run_workload

SLOTS = {SlotName("cpu"): Decimal(1), SlotName("cuda.device"): Decimal(1)}
TEARDOWN = [  # the reverse of the allocation order
    "pre_terminate:cpu",
    "pre_terminate:cuda",
    "post_terminate:cpu",
    "post_terminate:cuda",
]


@pytest.fixture
def config(mock_node):
    return load_host_config(mock_node(cpus=2, gpus=1))


class Outcome:
    """What a run left behind: its steps, its output, and the node's state afterwards."""

    def __init__(self) -> None:
        self.steps: list[str] = []
        self.lines: list[str] = []
        self.records: list[tuple[str, str]] = []
        self.allocated: dict[str, Decimal] = {}
        self.result: object = None


async def _run(config, argv, *, checkpoint=None, slots=SLOTS, grace=5.0) -> Outcome:
    outcome = Outcome()

    def step(name: str) -> None:
        outcome.steps.append(name)
        if checkpoint is not None:
            checkpoint(name)

    async with Node.open(config) as host:
        try:
            outcome.result = await run_workload(
                host,
                AgentId("agent-1"),
                slots,
                argv,
                grace=grace,
                checkpoint=step,
                echo=outcome.lines.append,
            )
        except BaseException as exc:  # the tests look at what was raised
            outcome.result = exc
        contexts = host.agents[AgentId("agent-1")].contexts
        outcome.allocated = {
            f"{key}/{slot}/{dev}": amount
            for key, ctx in contexts.items()
            for slot, per_device in ctx.alloc_map.allocations.items()
            for dev, amount in per_device.items()
            if amount
        }
    outcome.records = list(Ledger(config.resource.state_dir).read_all())
    return outcome


def test_a_failing_record_of_pre_terminate_still_ends_the_tree_and_releases(config):
    def checkpoint(name: str) -> None:
        if name == "pre_terminate:cpu":  # raised where the ledger write is recorded
            raise OSError(28, "No space left on device")

    outcome = asyncio.run(_run(config, ["true"], checkpoint=checkpoint))
    assert outcome.result == 0
    assert outcome.steps[-5:] == [*TEARDOWN, "released"]
    assert any("No space left on device" in line for line in outcome.lines)
    assert outcome.records == []
    assert outcome.allocated == {}


def test_a_failing_render_still_reaches_post_terminate_and_the_release(config, monkeypatch):
    def broken(*_args, **_kwargs):
        raise RuntimeError("render broke")

    monkeypatch.setattr(process, "render_process", broken)
    outcome = asyncio.run(_run(config, ["true"]))
    assert isinstance(outcome.result, RuntimeError)
    assert "spawned" not in outcome.steps
    assert outcome.steps[-2:] == TEARDOWN[2:]
    assert outcome.records == []
    assert outcome.allocated == {}
    launchers = [p for p in psutil.Process().children() if "launcher.py" in " ".join(p.cmdline())]
    assert launchers == []


def test_failing_cgroup_setup_still_tears_down(config, monkeypatch):
    def broken(*_args, **_kwargs):
        raise OSError("cgroup fs vanished")

    monkeypatch.setattr(process, "create_cgroups", broken)
    outcome = asyncio.run(_run(config, ["true"]))
    assert isinstance(outcome.result, OSError)
    assert outcome.steps[-2:] == TEARDOWN[2:]
    assert outcome.records == []
    assert outcome.allocated == {}


def test_cancelling_the_run_during_teardown_waits_for_the_whole_teardown(config):
    async def main() -> Outcome:
        task: asyncio.Task[Outcome] | None = None

        def checkpoint(name: str) -> None:
            if name == "pre_terminate:cuda":
                assert task is not None
                task.cancel()  # e.g. the agent program giving up on the run

        async def inner() -> Outcome:
            return await _run(config, ["true"], checkpoint=checkpoint)

        task = asyncio.create_task(inner())
        return await task

    outcome = asyncio.run(main())
    assert isinstance(outcome.result, asyncio.CancelledError)
    assert outcome.steps[-4:] == TEARDOWN
    assert outcome.records == []
    assert outcome.allocated == {}


def test_a_signal_during_teardown_is_forwarded_and_does_not_abandon_it(config):
    """SIGINT reaching the run while it ends the tree does not cancel the teardown."""

    def checkpoint(name: str) -> None:
        if name == "pre_terminate:cuda":
            # handled by the run's signal relay (the event loop's handler), not by pytest
            os.kill(os.getpid(), signal.SIGINT)

    outcome = asyncio.run(_run(config, ["true"], checkpoint=checkpoint))
    assert outcome.result == 0
    assert outcome.steps[-5:] == [*TEARDOWN, "released"]
    assert outcome.records == []
    assert outcome.allocated == {}


def test_a_forwarded_signal_spares_other_children_of_this_process(config, tmp_path):
    helper = subprocess.Popen(["sleep", "60"])  # e.g. a plugin's helper daemon
    pidfile = tmp_path / "bg.pid"

    def checkpoint(name: str) -> None:
        if name == "running":  # handled by the run's signal relay: sent to the workload only
            while not pidfile.exists() or not pidfile.read_text().strip():
                pass
            os.kill(os.getpid(), signal.SIGTERM)

    try:
        script = f"sleep 60 & echo $! > {pidfile}; wait"
        outcome = asyncio.run(_run(config, ["sh", "-c", script], checkpoint=checkpoint, grace=30))
        assert outcome.result == 128 + signal.SIGTERM
        assert helper.poll() is None
        stray = int(pidfile.read_text())
        assert not psutil.pid_exists(stray) or (
            psutil.Process(stray).status() == psutil.STATUS_ZOMBIE
        )
        assert outcome.records == []
    finally:
        helper.kill()
        helper.wait()


def test_a_huge_request_is_refused_at_once_with_its_amount_in_full(config):
    slots = {SlotName("cpu"): Decimal("1e40")}
    outcome = asyncio.run(_run(config, ["true"], slots=slots))
    assert isinstance(outcome.result, InsufficientResource)
    assert f"requested 1{'0' * 40}," in str(outcome.result)
    assert outcome.steps == []
    assert outcome.records == []


def test_an_astronomical_request_is_refused_without_converting_it(config):
    slots = {SlotName("cpu"): Decimal("1e999999")}
    outcome = asyncio.run(_run(config, [sys.executable, "-c", "pass"], slots=slots))
    assert isinstance(outcome.result, InsufficientResource)
    assert "only 2 allocatable" in str(outcome.result)
    assert outcome.records == []
