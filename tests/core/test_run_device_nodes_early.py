"""A run asks the plugins for their device nodes while its hooks prepare, not after them."""

from __future__ import annotations

import asyncio
import threading
import time
from decimal import Decimal

from accelkit.config import load_host_config
from accelkit.node import Node
from accelkit.types import AgentId, SlotName
from accelkit_mock.plugin import MockLifecycleHook, MockPlugin

#: far longer than a device_nodes call on any machine; only a failure waits for it
MEET = 30.0


def test_pre_create_runs_while_the_device_nodes_are_asked(mock_node, monkeypatch):
    asked = threading.Event()
    waited: list[float] = []
    nodes = MockPlugin.device_nodes
    pre_create = MockLifecycleHook.pre_create

    def device_nodes(self, devices):
        asked.set()
        return nodes(self, devices)

    async def patient(self):
        # answered only once the device nodes were asked: asked after prepare, this waits
        # out MEET and the run below fails
        began = time.monotonic()
        while not asked.is_set() and time.monotonic() - began < MEET:
            await asyncio.sleep(0.001)
        waited.append(time.monotonic() - began)
        assert asked.is_set(), "the device nodes were not asked while pre_create ran"
        return await pre_create(self)

    monkeypatch.setattr(MockPlugin, "device_nodes", device_nodes)
    monkeypatch.setattr(MockLifecycleHook, "pre_create", patient)

    async def main() -> int:
        async with Node.open(load_host_config(mock_node(cpus=1, gpus=1))) as node:
            return await node.run(AgentId("agent-1"), {SlotName("cpu"): Decimal(1)}, ["true"])

    assert asyncio.run(main()) == 0
    assert len(waited) == 1
    assert waited[0] < MEET
