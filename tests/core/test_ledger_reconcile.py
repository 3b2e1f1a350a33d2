"""Booking through the ledger, reconciliation on start, and fault injection with a real host."""

from __future__ import annotations

import asyncio
import os
from decimal import Decimal

import pytest

from accelkit.config import load_host_config
from accelkit.errors import InsufficientResource, InvalidResourceArgument, WorkloadError
from accelkit.events import WorkloadPhase
from accelkit.host import PartitionHost
from accelkit.node import Node
from accelkit.types import AgentId, DeviceName, SlotName, Workload
from accelkit.workload import Ledger, LedgerRecord, ProcessStamp
from accelkit.workload.bookkeeper import Bookkeeper
from accelkit.workload.reconcile import Liveness, Reconciler
from accelkit_mock.plugin import MockLifecycleHook

AGENT = AgentId("agent-1")
CUDA = DeviceName("cuda")
SLOTS = {
    SlotName("cuda.device"): Decimal(1),
    SlotName("cpu"): Decimal(1),
    SlotName("mem"): Decimal(2**30),
}
DEAD = ProcessStamp(os.getpid(), "1")  # our pid with another start time: a gone process
ALIVE = ProcessStamp.of(os.getpid())


@pytest.fixture
def config(mock_node):
    return load_host_config(mock_node(cpus=2, mem="4G", gpus=2))


def with_host(config, body):
    async def main():
        async with PartitionHost.open(config) as host:
            return await body(host, Ledger(config.resource.state_dir))

    return asyncio.run(main())


def put_raw(ledger, agent, workload, body):
    """Store a row as another writer could: any text under any key."""
    with ledger.transaction():
        ledger.db.execute(
            "INSERT OR REPLACE INTO records VALUES (?, ?, 0, ?)", (agent, workload, body)
        )


def used(host) -> dict:
    """Every nonzero amount in the agent's maps."""
    return {
        (key, dev): amount
        for key, ctx in host.agents[AGENT].contexts.items()
        for per_device in ctx.alloc_map.allocations.values()
        for dev, amount in per_device.items()
        if amount
    }


def foreign(
    workload_id,
    *,
    owner=DEAD,
    leader=DEAD,
    device="cuda0",
    hooks=("cuda",),
    agent=AGENT,
    kind="process_tree",
    core="1",
):
    rec = LedgerRecord(
        agent,
        Workload(workload_id, kind),
        {
            CUDA: {SlotName("cuda.device"): {device: Decimal(1)}},
            DeviceName("cpu"): {SlotName("cpu"): {core: Decimal(1)}},
        },
        (CUDA, DeviceName("cpu")),
        owner=owner,
        leader=leader,
    )
    for key in hooks:
        rec = rec.with_phase(DeviceName(key), WorkloadPhase.PRE_CREATE)
    return rec


def test_book_records_and_release_frees(config):
    async def body(host, ledger):
        keeper = Bookkeeper(ledger, host)
        rec = await keeper.book(AGENT, Workload.process_tree("w1"), SLOTS, leader=ALIVE)
        assert ledger.read(*rec.key) == rec
        assert rec.order == ("cuda", "cpu", "mem")
        assert used(host) == {("cuda", "cuda0"): 1, ("cpu", "0"): 1, ("mem", "root"): 2**30}
        with pytest.raises(InvalidResourceArgument, match="already has a workload"):
            await keeper.book(AGENT, Workload.process_tree("w1"), SLOTS)
        keeper.release(rec.key)
        assert used(host) == {}
        assert ledger.scan().records == {}

    with_host(config, body)


def test_refused_booking_leaves_nothing(config):
    async def body(host, ledger):
        keeper = Bookkeeper(ledger, host)
        with pytest.raises(InsufficientResource, match=r"cuda\.device"):
            await keeper.book(AGENT, Workload.process_tree("w"), {SlotName("cuda.device"): 3})
        with pytest.raises(InvalidResourceArgument, match="unknown agent"):
            await keeper.book(AgentId("agent-9"), Workload.process_tree("w"), SLOTS)
        assert used(host) == {}
        assert ledger.scan().records == {}

    with_host(config, body)


def test_reconcile_keeps_live_workloads_and_finishes_dead_ones(config):
    async def body(host, ledger):
        ledger.write(foreign("live", leader=ALIVE, device="cuda0", core="0"))
        ledger.write(foreign("dead", device="cuda1", hooks=("cuda", "cpu")))
        ledger.write(foreign("managed", owner=ALIVE, leader=DEAD, device="cuda1"))
        report = await Bookkeeper(ledger, host).reconcile()
        assert sorted(k[1] for k in report.kept) == ["live", "managed"]
        [torn] = report.torn_down
        assert torn.workload_id == "dead"
        assert torn.post_terminated == ("cpu", "cuda")  # reverse allocation order
        assert sorted(k[1] for k in ledger.scan().records) == ["live", "managed"]
        assert used(host) == {
            ("cuda", "cuda0"): 1,
            ("cuda", "cuda1"): 1,
            ("cpu", "0"): 1,
            ("cpu", "1"): 1,
        }
        assert report.double_booked == ()

    with_host(config, body)


def test_a_later_booking_gets_the_devices_of_finished_workloads(config):
    async def body(host, ledger):
        ledger.write(foreign("dead", device="cuda0"))
        ledger.write(foreign("live", leader=ALIVE, device="cuda1", hooks=()))
        keeper = Bookkeeper(ledger, host)
        rec = await keeper.book(
            AGENT, Workload.process_tree("new"), {SlotName("cuda.device"): Decimal(1)}
        )
        assert rec.allocation[CUDA] == {"cuda.device": {"cuda0": 1}}
        assert [t.workload_id for t in keeper.last_report.torn_down] == ["dead"]
        with pytest.raises(InsufficientResource):
            await keeper.book(
                AGENT, Workload.process_tree("more"), {SlotName("cuda.device"): Decimal(1)}
            )

    with_host(config, body)


def test_double_booking_is_reported_not_fixed(config):
    async def body(host, ledger):
        ledger.write(foreign("first", leader=ALIVE, device="cuda0"))
        ledger.write(foreign("second", leader=ALIVE, device="cuda0", core="0"))
        report = await Bookkeeper(ledger, host).reconcile()
        [booking] = report.double_booked
        assert booking.device_id == "cuda0"
        assert booking.capacity == 1
        assert sorted(w for w, _a in booking.claims) == ["first", "second"]
        assert not report.clean
        assert any("cuda0" in line and "beyond its capacity" in line for line in report.messages())
        assert len(ledger.scan().records) == 2  # both records stay for the operator

    with_host(config, body)


def test_corrupt_files_are_set_aside_and_start_up_goes_on(config):
    async def body(host, ledger):
        ledger.write(foreign("live", leader=ALIVE))
        put_raw(ledger, "agent-1", "broken", '{"format": "accel')
        report = await Bookkeeper(ledger, host).reconcile()
        [aside] = report.set_aside
        assert aside.name == "agent-1+broken"
        assert ledger.set_aside_rows()[0][:2] == ("agent-1", "broken")
        assert [k[1] for k in report.kept] == ["live"]
        assert any("set aside" in line for line in report.messages())

    with_host(config, body)


def test_records_of_an_agent_this_host_lacks_hold_their_devices(config):
    """A record booked under another partition (its agent is not one of this config's) keeps
    its devices in the maps of the agents that have them now; a dead one is finished."""

    async def body(host, ledger):
        ledger.write(foreign("elsewhere", agent=AgentId("agent-7"), leader=ALIVE))
        ledger.write(foreign("orphan", agent=AgentId("agent-7"), device="cuda1", core="0"))
        ledger.write(
            foreign("box", kind="container", owner=None, leader=None, device="cuda1", core="0")
        )
        keeper = Bookkeeper(ledger, host)
        report = await keeper.reconcile()
        assert used(host) == {
            ("cuda", "cuda0"): 1,
            ("cuda", "cuda1"): 1,
            ("cpu", "0"): 1,
            ("cpu", "1"): 1,
        }
        assert "cannot tell whether workload 'box' is alive" in "\n".join(report.problems)
        assert [t.workload_id for t in report.torn_down] == ["orphan"]
        assert sorted(k[1] for k in ledger.scan().records) == ["box", "elsewhere"]
        with pytest.raises(
            InsufficientResource, match=r"'elsewhere' of agent 'agent-7'.*another partition"
        ):
            await keeper.book(
                AGENT, Workload.process_tree("more"), {SlotName("cuda.device"): Decimal(1)}
            )

    with_host(config, body)


def test_records_finished_by_another_process_are_freed_on_the_next_sync(config):
    async def body(host, ledger):
        rec = foreign("live", leader=ALIVE)
        ledger.write(rec)
        keeper = Bookkeeper(ledger, host)
        await keeper.reconcile()
        assert ("cuda", "cuda0") in used(host)
        ledger.remove(*rec.key)
        await keeper.reconcile()
        assert used(host) == {}

    with_host(config, body)


def test_liveness_decides_what_happens():
    reconciler = Reconciler(Ledger("/nonexistent"), {}, liveness=lambda _r: Liveness.RUNNING)
    assert asyncio.run(reconciler.liveness(foreign("x"))) is Liveness.RUNNING


def test_a_teardown_interrupted_by_a_crash_does_not_repeat_finished_hooks(config, monkeypatch):
    calls = []

    async def post_terminate(self):
        calls.append(self.key)

    monkeypatch.setattr(MockLifecycleHook, "post_terminate", post_terminate)

    async def body(host, ledger):
        rec = foreign("dead", hooks=("cuda", "cpu")).with_phase(
            DeviceName("cpu"), WorkloadPhase.POST_TERMINATE
        )
        ledger.write(rec)
        report = await Bookkeeper(ledger, host).reconcile()
        assert report.torn_down[0].post_terminated == ("cuda",)

    with_host(config, body)
    assert calls == ["cuda"]


PHASES = ("pre_create", "post_create", "pre_terminate", "post_terminate")
ORDER = ("cuda", "cpu", "mem")


@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize("failing", ORDER)
def test_faults_with_a_real_host_leave_the_ledger_and_maps_empty(
    config, monkeypatch, phase, failing
):
    calls: list[tuple[str, str]] = []

    def instrument(name):
        original = getattr(MockLifecycleHook, name)

        async def method(self):
            calls.append((self.key, name))
            if self.key == failing and name == phase:
                raise RuntimeError(f"{self.key} {name} failed")
            return await original(self)

        monkeypatch.setattr(MockLifecycleHook, name, method)

    for name in PHASES:
        instrument(name)

    async def body(host, ledger):
        keeper = Bookkeeper(ledger, host)
        rec = await keeper.book(AGENT, Workload.process_tree("w"), SLOTS, leader=ALIVE)
        driver = keeper.lifecycle(rec)

        async def life():
            await driver.prepare()
            try:
                await driver.post_create()
            finally:
                await driver.terminate()

        with pytest.raises((RuntimeError, WorkloadError)):
            await life()
        assert ledger.scan().records == {}
        assert used(host) == {}

    with_host(config, body)
    # a started pre_create gets post_terminate, the failing one's too (DESIGN §9)
    prepared = ORDER[: ORDER.index(failing) + 1] if phase == "pre_create" else ORDER
    for key in ORDER:
        assert calls.count((key, "post_terminate")) == (1 if key in prepared else 0)


def test_a_creation_failure_after_prepare_frees_everything(config):
    async def body(host, ledger):
        keeper = Bookkeeper(ledger, host)
        rec = await keeper.book(AGENT, Workload.process_tree("w"), SLOTS, leader=ALIVE)
        driver = keeper.lifecycle(rec)
        await driver.prepare()
        assert ledger.read(*rec.key).hooks == dict.fromkeys(ORDER, ("pre_create",))
        await driver.terminate()  # the workload could not be created
        assert ledger.scan().records == {}
        assert used(host) == {}

    with_host(config, body)


def test_the_host_reconciles_the_ledger_as_it_starts(config):
    ledger = Ledger(config.resource.state_dir)
    ledger.write(foreign("live", leader=ALIVE, device="cuda0", core="0"))
    ledger.write(foreign("dead", device="cuda1", hooks=("cuda",)))

    async def main():
        async with Node.open(config) as node:
            report = node.last_report
            return report, used(node)

    report, in_use = asyncio.run(main())
    assert [k[1] for k in report.kept] == ["live"]
    assert [t.workload_id for t in report.torn_down] == ["dead"]
    assert in_use == {("cuda", "cuda0"): 1, ("cpu", "0"): 1}
    assert sorted(k[1] for k in ledger.scan().records) == ["live"]


def test_a_bare_partition_host_leaves_the_ledger_alone(config):
    ledger = Ledger(config.resource.state_dir)
    ledger.write(foreign("dead", device="cuda1", hooks=("cuda",)))

    async def main():
        async with PartitionHost.open(config) as host:
            assert not hasattr(host, "bookkeeper")
            return used(host)

    assert asyncio.run(main()) == {}
    assert sorted(k[1] for k in ledger.scan().records) == ["dead"]
