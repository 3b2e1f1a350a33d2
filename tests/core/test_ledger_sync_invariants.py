"""Hypothesis: two processes' bookkeepers on one ledger, any interleaving of bookings and releases.

After every step, the incremental sync of each side (what a booking does) leaves its maps holding
exactly what the ledger's records hold — every record applied once, none missing, nothing freed
twice — and no device is granted beyond its capacity.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections import Counter
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accelkit.config import load_host_config
from accelkit.errors import InsufficientResource
from accelkit.host import PartitionHost
from accelkit.types import AgentId, SlotName, Workload
from accelkit.workload import Ledger, ProcessStamp
from accelkit.workload.bookkeeper import Bookkeeper

AGENT = AgentId("agent-1")

steps = st.lists(
    st.tuples(
        st.sampled_from(["book", "release"]),
        st.integers(0, 1),  # which side
        st.sampled_from(["cuda.device", "cpu"]),
        st.integers(0, 50),  # which of the side's workloads to release
    ),
    min_size=1,
    max_size=40,
)


@pytest.fixture(scope="module")
def owners():
    """Two live processes standing for the two accelkit processes."""
    procs = [subprocess.Popen(["sleep", "3600"]) for _ in range(2)]
    stamps = [ProcessStamp.of(p.pid) for p in procs]
    yield stamps
    for p in procs:
        p.kill()
        p.wait()


def usage(host) -> Counter:
    found: Counter = Counter()
    for key, ctx in host.agents[AGENT].contexts.items():
        for slot, per_device in ctx.alloc_map.allocations.items():
            for device, amount in per_device.items():
                if amount:
                    found[(key, slot, device)] += amount
    return found


def ledger_usage(ledger: Ledger) -> Counter:
    found: Counter = Counter()
    for record in ledger.read_all().values():
        for key, alloc in record.allocation.items():
            for slot, per_device in alloc.items():
                for device, amount in per_device.items():
                    if amount:
                        found[(key, slot, device)] += amount
    return found


@pytest.mark.slow
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(script=steps)
def test_both_sides_hold_exactly_what_the_ledger_holds(mock_node, owners, tmp_path_factory, script):
    path = mock_node(cpus=3, gpus=3)
    state = tmp_path_factory.mktemp("state")
    config = load_host_config(path)  # its state-dir is not used: each example has its own

    async def main():
        async with PartitionHost.open(config) as a, PartitionHost.open(config) as b:
            hosts = (a, b)
            keepers = [
                Bookkeeper(Ledger(state), host, owner=owner)
                for host, owner in zip(hosts, owners, strict=True)
            ]
            counter = 0
            for action, side, slot, pick in script:
                keeper = keepers[side]
                if action == "book":
                    counter += 1
                    with contextlib.suppress(InsufficientResource):
                        await keeper.book(
                            AGENT,
                            Workload.process_tree(f"w{counter}"),
                            {SlotName(slot): Decimal(1)},
                        )
                elif keeper.owned:
                    keys = sorted(keeper.owned)
                    keeper.release(keys[pick % len(keys)])
                expected = ledger_usage(keepers[0].ledger)
                for other in keepers:
                    with other.ledger.transaction():
                        report = other._catch_up()
                    assert report.double_booked == ()
                    assert usage(other.host) == expected
                assert all(amount <= 1 for amount in expected.values())

    asyncio.run(main())
