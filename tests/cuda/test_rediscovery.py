"""A MIG reconfiguration in the (fake) NVML, made while no instance is allocated, is picked up
by a running node's rediscovery: the new profiles are granted, the old instances never again."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from pathlib import Path

import pytest

from accelkit.errors import InsufficientResource
from accelkit.node import Node
from accelkit.node.rediscovery import VANISHED
from accelkit.types import AgentId, DeviceName, SlotName, Workload, WorkloadType

from . import fake_nvml as fk
from .test_node_health import node_over

CUDA = DeviceName("cuda")
AGENT = AgentId("agent-1")


async def book(node: Node, name: str, slot: str) -> list[str]:
    workload = Workload(name, WorkloadType.PROCESS_TREE)
    record = await node.book(AGENT, workload, {SlotName(slot): Decimal(1)})
    return sorted(record.allocation[CUDA][SlotName(slot)])


def test_a_mig_reconfiguration_is_picked_up_without_a_restart(tmp_path: Path, sysfs: Path) -> None:
    gpu = fk.mig_gpu(0, ["3g.40gb", "3g.40gb"])
    nvml = fk.FakeNVML([gpu, fk.FakeGpu(1)])

    async def main() -> None:
        async with node_over(tmp_path, nvml, sysfs) as node:
            before = set(node.agents[AGENT].available_slots())
            assert "cuda.mig-3g.40gb" in before
            assert "cuda.mig-2g.20gb" not in before
            old = sorted(d.device_id for d in node.host.plugins[CUDA].devices)
            # the operator destroys both 3g instances and creates three 2g ones (none in use)
            reconfigured = fk.mig_gpu(0, ["2g.20gb", "2g.20gb", "2g.20gb"])
            gpu.migs = reconfigured.migs
            report = await node.rediscover()
            found = report.plugins[CUDA]
            assert len(found.added) == 3
            assert len(found.removed) == 2
            assert set(found.removed) <= set(old)
            assert not report.held
            assert node.agents[AGENT].available_slots()[SlotName("cuda.mig-2g.20gb")] == 3
            granted = await book(node, "small", "cuda.mig-2g.20gb")
            assert granted[0] in found.added
            with pytest.raises(InsufficientResource, match="cordoned"):
                await book(node, "large", "cuda.mig-3g.40gb")
            for device in found.removed:
                assert VANISHED in node.health.of(CUDA, device).reason
            assert await book(node, "whole", "cuda.device") == ["cuda1"]

    asyncio.run(main())
