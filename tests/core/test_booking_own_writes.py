"""A process's catch-up does not read back what it wrote itself, when nobody else wrote between
(the writers' lock says so), and still reads every other process's write."""

from __future__ import annotations

import asyncio
import os
from decimal import Decimal

import pytest

from accelkit.config import load_host_config
from accelkit.errors import InsufficientResource
from accelkit.node import Node
from accelkit.types import AgentId, SlotName, Workload
from accelkit.workload import ProcessStamp

AGENT = AgentId("agent-1")
ONE_GPU = {SlotName("cuda.device"): Decimal(1)}


def _read_since(statements: list[str]) -> set[int]:
    """The counter values the reads of changes started after (``... WHERE seq > N``)."""
    return {int(part.split()[0]) for s in statements for part in s.split("WHERE seq > ")[1:]}


def test_booking_after_own_booking_and_release_reads_no_rows_back(mock_node):
    config = load_host_config(mock_node(gpus=4))
    me = ProcessStamp.of(os.getpid())
    statements: list[str] = []

    async def main():
        async with Node.open(config) as node:
            keeper = node.bookkeeper
            first = await keeper.book(AGENT, Workload.process_tree("w0"), ONE_GPU, leader=me)
            keeper.release(first.key)
            await keeper.book(AGENT, Workload.process_tree("w1"), ONE_GPU, leader=me)
            keeper.release((AGENT, "w1"))
            now = keeper.ledger.seq
            keeper.ledger.db.set_trace_callback(statements.append)
            await keeper.book(AGENT, Workload.process_tree("w2"), ONE_GPU, leader=me)
            keeper.ledger.db.set_trace_callback(None)
            assert keeper._seq == keeper.ledger.seq
            return now

    now = asyncio.run(main())
    assert statements  # the booking ran through this connection
    # every read of changes starts past its own writes: none of them is read back
    assert _read_since(statements) <= {now}


def test_another_process_write_between_own_writes_is_still_read(mock_node):
    config = load_host_config(mock_node(gpus=2))
    me = ProcessStamp.of(os.getpid())

    async def main():
        async with Node.open(config) as a, Node.open(config) as b:
            mine = await a.bookkeeper.book(AGENT, Workload.process_tree("a0"), ONE_GPU, leader=me)
            theirs = await b.bookkeeper.book(AGENT, Workload.process_tree("b0"), ONE_GPU, leader=me)
            a.bookkeeper.release(mine.key)  # b wrote between a's booking and this release
            again = await a.bookkeeper.book(AGENT, Workload.process_tree("a1"), ONE_GPU, leader=me)
            assert again.allocation == mine.allocation != theirs.allocation
            with pytest.raises(InsufficientResource):
                await a.bookkeeper.book(AGENT, Workload.process_tree("a2"), ONE_GPU, leader=me)

    asyncio.run(main())
