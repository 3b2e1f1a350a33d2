"""A booking reads only what changed in the ledger and judges no liveness, so its cost does not
grow with the number of live workloads (L1 of the benchmarks measures the time)."""

from __future__ import annotations

import asyncio
import os
from decimal import Decimal

from accelkit.config import load_host_config
from accelkit.node import Node
from accelkit.types import AgentId, SlotName, Workload
from accelkit.workload import ProcessStamp, ledger

AGENT = AgentId("agent-1")
ONE_GPU = {SlotName("cuda.device"): Decimal(1)}


def test_a_booking_with_hundreds_live_parses_and_judges_nothing_else(mock_node, monkeypatch):
    config = load_host_config(mock_node(gpus=400))
    me = ProcessStamp.of(os.getpid())
    parsed: list[object] = []
    judged: list[object] = []
    real_parse, real_running = ledger.parse_record, ProcessStamp.is_running

    def counting_parse(body):
        parsed.append(body)
        return real_parse(body)

    def counting_running(self):
        judged.append(self)
        return real_running(self)

    async def main():
        async with Node.open(config) as node:
            for i in range(300):
                await node.book(AGENT, Workload.process_tree(f"w{i}"), ONE_GPU, leader=me)
            monkeypatch.setattr(ledger, "parse_record", counting_parse)
            monkeypatch.setattr(ProcessStamp, "is_running", counting_running)
            await node.book(AGENT, Workload.process_tree("one-more"), ONE_GPU, leader=me)
            monkeypatch.undo()

    asyncio.run(main())
    assert parsed == []  # only its own writes changed the ledger since the last booking
    assert judged == []
