"""``accelkit status`` builds the node's runtimes only when a workload needs one to be judged.

A workload whose owner process runs is ``managed`` whatever its runtime; only a record whose
owner is gone (and that has a handle, or is a container) asks its runtime. Building every
runtime imports each runtime's code, which ``status`` with thousands of managed workloads
need not pay. When one is needed it is built once, asked, and closed when the command ends.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import ClassVar

import pytest

from accelkit.cli.app import main
from accelkit.config import load_host_config
from accelkit.node import Node
from accelkit.runtime import registry
from accelkit.runtime.base import Runtime, TrackingRuntime, WorkloadHandle
from accelkit.types import AgentId, SlotName, Workload, WorkloadType
from accelkit.workload import ProcessStamp

AGENT = AgentId("agent-1")
SLOTS = {SlotName("cpu"): Decimal(1)}


class Asked(TrackingRuntime):
    """A runtime that says each workload runs, and counts what it is asked."""

    name = "asked"
    tracks = "nothing"
    workload_type: ClassVar[WorkloadType] = WorkloadType.PROCESS_TREE
    calls: ClassVar[dict[str, int]] = {"is_alive": 0, "close": 0}

    async def is_alive(self, handle: WorkloadHandle) -> bool | None:
        self.calls["is_alive"] += 1
        return True

    async def stop(self, handle: WorkloadHandle, grace: float) -> None:
        raise AssertionError("status stops nothing")

    async def close(self) -> None:
        self.calls["close"] += 1


@pytest.fixture
def built(monkeypatch) -> list[int]:
    """How often the node's runtimes were built; they are :class:`Asked` alone."""
    builds: list[int] = []
    Asked.calls.update(is_alive=0, close=0)

    def classes(*_args: object, **_kwargs: object) -> Mapping[str, type[Runtime]]:
        builds.append(1)
        return {Asked.name: Asked}

    monkeypatch.setattr(registry, "runtime_classes", classes)
    return builds


async def _book(config: Path, *, handed_over: bool) -> None:
    """Two workloads led by this process; with ``handed_over`` the second has a handle of
    the ``asked`` runtime and no owner (its liveness is the runtime's to tell)."""
    stamp = ProcessStamp.of(os.getpid())
    async with Node.open(load_host_config(config), runtimes={}) as node:
        await node.book(AGENT, Workload.process_tree("owned"), SLOTS, leader=stamp)
        record = await node.book(AGENT, Workload.process_tree("tracked"), SLOTS, leader=stamp)
        if handed_over:
            node.record_handle(record.key, WorkloadHandle(Asked.name, "tracked-1"))
            node.bookkeeper.hand_over(record.key)


def _shown(capsys) -> dict[str, str]:
    return {row["workload"]: row["liveness"] for row in json.loads(capsys.readouterr().out)}


@pytest.mark.parametrize("args", [["--json"], []], ids=["json", "table"])
def test_workloads_whose_owner_runs_build_no_runtime(mock_node, built, capsys, args):
    config = mock_node(cpus=2)
    asyncio.run(_book(config, handed_over=False))
    assert main(["status", "--config", str(config), *args]) == 0
    out = capsys.readouterr().out
    assert "owned" in out
    assert "tracked" in out
    assert built == []
    assert Asked.calls == {"is_alive": 0, "close": 0}


def test_a_workload_its_runtime_must_judge_builds_them_once_and_closes_them(
    mock_node, built, capsys
):
    config = mock_node(cpus=2)
    asyncio.run(_book(config, handed_over=True))
    assert main(["status", "--config", str(config), "--json"]) == 0
    assert _shown(capsys) == {"owned": "managed", "tracked": "running"}
    assert built == [1]
    assert Asked.calls == {"is_alive": 1, "close": 1}
