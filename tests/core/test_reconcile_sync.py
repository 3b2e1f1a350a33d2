"""Reconciling again and again: concurrent coroutines, reused keys, retried claims, observers,
records that fail, and a state directory that cannot hold the ledger."""

from __future__ import annotations

import asyncio
import decimal
import json
import os
import subprocess
from decimal import Decimal

import pytest

from accelkit.config import load_host_config
from accelkit.errors import ConfigError
from accelkit.events import WorkloadPhase
from accelkit.host import PartitionHost
from accelkit.node import Node
from accelkit.types import AgentId, DeviceName, SlotName, Workload
from accelkit.workload import Ledger, LedgerRecord, ProcessStamp
from accelkit.workload.bookkeeper import Bookkeeper
from accelkit.workload.reconcile import liveness_of
from accelkit_mock.plugin import MockLifecycleHook

AGENT = AgentId("agent-1")
CUDA = DeviceName("cuda")
ONE_GPU = {SlotName("cuda.device"): Decimal(1)}
DEAD = ProcessStamp(os.getpid(), "1")  # our pid with another start time: a gone process


@pytest.fixture
def config(mock_node):
    return load_host_config(mock_node(cpus=2, gpus=2))


@pytest.fixture
def sleepers():
    """Start live processes that stand for other accelkit processes; killed afterwards."""
    started: list[subprocess.Popen[bytes]] = []

    def start() -> ProcessStamp:
        proc = subprocess.Popen(["sleep", "600"])
        started.append(proc)
        stamp = ProcessStamp.of(proc.pid)
        assert stamp is not None
        return stamp

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def with_host(config, body, *, reconcile=True):
    """Run ``body`` with a node (which reconciles on open), or with a bare partition host."""

    async def main():
        async with Node.open(config) if reconcile else PartitionHost.open(config) as host:
            return await body(host, Ledger(config.resource.state_dir))

    return asyncio.run(main())


def gpus(host) -> dict:
    """The nonzero GPU amounts in the agent's map."""
    allocs = host.agents[AGENT].contexts[CUDA].alloc_map.allocations
    return {dev: amount for dev, amount in allocs["cuda.device"].items() if amount}


def claim(workload_id, *, owner, device="cuda0", leader=None, hooks=(), created_at=None):
    rec = LedgerRecord(
        AGENT,
        Workload.process_tree(workload_id),
        {CUDA: {SlotName("cuda.device"): {device: Decimal(1)}}},
        (CUDA,),
        owner=owner,
        leader=leader,
        **({"created_at": created_at} if created_at else {}),
    )
    for phase in hooks:
        rec = rec.with_phase(CUDA, phase)
    return rec


@pytest.fixture
def post_terminates(monkeypatch):
    """Every ``post_terminate`` of a mock hook, by workload id; each one yields to the loop."""
    calls: list[str] = []
    original = MockLifecycleHook.post_terminate

    async def post_terminate(self):
        calls.append(self.workload.id)
        for _ in range(5):
            await asyncio.sleep(0)  # let other coroutines run meanwhile
        return await original(self)

    monkeypatch.setattr(MockLifecycleHook, "post_terminate", post_terminate)
    return calls


# -- one process, several coroutines ------------------------------------------------------------


def test_concurrent_bookings_finish_a_dead_workload_once(config, post_terminates):
    async def body(host, ledger):
        ledger.write(claim("dead", owner=DEAD, hooks=(WorkloadPhase.PRE_CREATE,)))
        keeper = Bookkeeper(ledger, host)
        a, b = await asyncio.gather(
            keeper.book(AGENT, Workload.process_tree("a"), ONE_GPU),
            keeper.book(AGENT, Workload.process_tree("b"), ONE_GPU),
        )
        assert {*a.allocation[CUDA]["cuda.device"], *b.allocation[CUDA]["cuda.device"]} == {
            "cuda0",
            "cuda1",
        }
        assert gpus(host) == {"cuda0": 1, "cuda1": 1}
        assert sorted(k[1] for k in ledger.scan().records) == ["a", "b"]

    with_host(config, body, reconcile=False)
    assert post_terminates == ["dead"]


def test_concurrent_reconciles_and_bookings_finish_a_dead_workload_once(config, post_terminates):
    async def body(host, ledger):
        ledger.write(claim("dead", owner=DEAD, hooks=(WorkloadPhase.PRE_CREATE,)))
        keeper = Bookkeeper(ledger, host)
        reports = await asyncio.gather(
            keeper.reconcile(),
            keeper.book(AGENT, Workload.process_tree("a"), ONE_GPU),
            keeper.reconcile(),
        )
        assert [t.workload_id for t in reports[0].torn_down] == ["dead"]
        assert reports[2].torn_down == ()
        assert gpus(host) == {"cuda0": 1}

    with_host(config, body, reconcile=False)
    assert post_terminates == ["dead"]


def test_a_release_during_a_sync_does_not_apply_the_released_record(config, post_terminates):
    async def body(host, ledger):
        keeper = Bookkeeper(ledger, host)
        mine = await keeper.book(AGENT, Workload.process_tree("mine"), ONE_GPU)
        # "a-dead" sorts before "mine": its teardown is awaited before "mine" is looked at
        ledger.write(claim("a-dead", owner=DEAD, device="cuda1", hooks=(WorkloadPhase.PRE_CREATE,)))

        async def release_soon():
            await asyncio.sleep(0)
            keeper.release(mine.key)

        await asyncio.gather(keeper.reconcile(), release_soon())
        assert ledger.scan().records == {}
        assert gpus(host) == {}

    with_host(config, body, reconcile=False)
    assert post_terminates == ["a-dead"]


# -- keys reused, claims retried ------------------------------------------------------------------


def test_a_key_reused_with_another_allocation_is_applied_again(config, sleepers):
    other = sleepers()

    async def body(host, ledger):
        keeper = host.bookkeeper
        ledger.write(claim("train", owner=other, device="cuda0"))
        await keeper.reconcile()
        assert gpus(host) == {"cuda0": 1}
        # the other process ends "train" and books the same id again, now on cuda1
        ledger.remove(AGENT, "train")
        ledger.write(claim("train", owner=other, device="cuda1"))
        mine = await keeper.book(AGENT, Workload.process_tree("mine"), ONE_GPU)
        assert mine.allocation[CUDA]["cuda.device"] == {"cuda0": 1}
        assert gpus(host) == {"cuda0": 1, "cuda1": 1}

    with_host(config, body)


def test_a_key_reused_by_another_owner_replaces_the_old_claim(config, sleepers):
    first, second = sleepers(), sleepers()

    async def body(host, ledger):
        keeper = host.bookkeeper
        ledger.write(claim("train", owner=first, device="cuda0", created_at="2024-01-01T00:00:00Z"))
        await keeper.reconcile()
        ledger.write(
            claim("train", owner=second, device="cuda0", created_at="2024-01-01T00:00:01Z")
        )
        report = await keeper.reconcile()
        assert report.clean
        assert gpus(host) == {"cuda0": 1}  # freed once, applied once: no double booking
        ledger.remove(AGENT, "train")
        await keeper.reconcile()
        assert gpus(host) == {}

    with_host(config, body)


def test_a_record_that_only_progresses_is_not_applied_again(config, sleepers):
    other = sleepers()

    async def body(host, ledger):
        keeper = host.bookkeeper
        rec = claim("train", owner=other, device="cuda0")
        ledger.write(rec)
        await keeper.reconcile()
        ledger.write(rec.with_phase(CUDA, WorkloadPhase.PRE_CREATE).with_leader(other))
        report = await keeper.reconcile()
        assert report.clean
        assert gpus(host) == {"cuda0": 1}

    with_host(config, body)


def test_a_double_booked_claim_is_retried_and_reported_until_it_fits(config, sleepers):
    x, y = sleepers(), sleepers()

    async def body(host, ledger):
        ledger.write(claim("X", owner=x, device="cuda0"))
        ledger.write(claim("Y", owner=y, device="cuda0"))
        keeper = Bookkeeper(ledger, host)
        for _ in range(2):  # reported on every sync, not only the first
            report = await keeper.reconcile()
            [booking] = report.double_booked
            assert booking.device_id == "cuda0"
            assert sorted(w for w, _a in booking.claims) == ["X", "Y"]
        ledger.remove(AGENT, "X")  # X's owner finishes normally
        mine = await keeper.book(AGENT, Workload.process_tree("mine"), ONE_GPU)
        assert keeper.last_report.clean
        assert mine.allocation[CUDA]["cuda.device"] == {"cuda1": 1}  # Y's cuda0 is applied now
        assert gpus(host) == {"cuda0": 1, "cuda1": 1}
        ledger.remove(AGENT, "Y")
        await keeper.reconcile()
        assert gpus(host) == {"cuda1": 1}

    with_host(config, body, reconcile=False)


# -- observers ----------------------------------------------------------------------------------


def test_teardowns_finished_by_reconciling_notify_observers(config):
    events = []

    async def body(host, ledger):
        phases = (WorkloadPhase.PRE_CREATE, WorkloadPhase.POST_CREATE)
        ledger.write(claim("dead", owner=DEAD, leader=DEAD, hooks=phases))
        keeper = Bookkeeper(ledger, host, notify=events.append)
        report = await keeper.reconcile()
        assert [t.workload_id for t in report.torn_down] == ["dead"]

    with_host(config, body, reconcile=False)
    assert [(e.workload.id, e.phase) for e in events] == [("dead", WorkloadPhase.POST_TERMINATE)]


# -- records that fail ----------------------------------------------------------------------------


def test_a_record_whose_apply_raises_is_reported_and_the_others_applied(
    config, sleepers, monkeypatch
):
    other = sleepers()

    async def body(host, ledger):
        amap = host.agents[AGENT].contexts[CUDA].alloc_map
        original = amap.apply_allocation

        def apply_allocation(alloc):
            if "cuda0" in alloc.get("cuda.device", {}):
                raise decimal.InvalidOperation([decimal.InvalidOperation])
            return original(alloc)

        monkeypatch.setattr(amap, "apply_allocation", apply_allocation)
        ledger.write(claim("bad", owner=other, device="cuda0"))
        ledger.write(claim("good", owner=other, device="cuda1"))
        keeper = Bookkeeper(ledger, host)
        report = await keeper.reconcile()
        [problem] = report.problems
        assert "'bad'" in problem
        assert "InvalidOperation" in problem
        assert gpus(host) == {"cuda1": 1}
        assert len(ledger.scan().records) == 2

    with_host(config, body, reconcile=False)


def test_a_record_whose_liveness_or_teardown_raises_is_reported(config, sleepers, monkeypatch):
    def broken_hook(*_args, **_kwargs):
        raise RuntimeError("hook factory broke")

    async def body(host, ledger):
        monkeypatch.setattr(host.agents[AGENT].contexts[CUDA], "create_lifecycle_hook", broken_hook)
        ledger.write(claim("dead", owner=DEAD, hooks=(WorkloadPhase.PRE_CREATE,)))
        ledger.write(claim("odd", owner=sleepers(), device="cuda1"))
        keeper = Bookkeeper(ledger, host)

        def liveness(record):
            if record.workload.id == "odd":
                raise OSError("cannot read /proc")
            return liveness_of(record)

        keeper.reconciler.liveness_override = liveness
        report = await keeper.reconcile()
        text = "\n".join(report.problems)
        assert "'dead'" in text
        assert "hook factory broke" in text
        assert "'odd'" in text
        assert "cannot read /proc" in text
        assert len(ledger.scan().records) == 2

    with_host(config, body, reconcile=False)


@pytest.mark.parametrize("amount", ["123456789012345678901234567890", "1E+999999", "1e-999999"])
def test_an_absurd_amount_in_the_ledger_does_not_stop_the_host(config, sleepers, amount):
    other = sleepers()
    ledger = Ledger(config.resource.state_dir)
    good = claim("good", owner=other, device="cuda1")
    ledger.write(good)
    data = claim("huge", owner=other).to_json()
    data["allocation"] = {"cuda": {"cuda.device": {"cuda0": amount}}}
    with ledger.transaction():
        ledger.db.execute(
            "INSERT INTO records VALUES (?, ?, 0, ?)", (AGENT, "huge", json.dumps(data))
        )
    ledger.close()

    async def body(host, _ledger):
        return host.bookkeeper.last_report, gpus(host)

    report, in_use = with_host(config, body)
    [aside] = report.set_aside
    assert aside.name == "agent-1+huge"
    assert "out of range" in aside.reason
    assert in_use == {"cuda1": 1}


# -- the state directory --------------------------------------------------------------------------


def test_a_state_dir_that_is_a_file_is_a_config_error_naming_the_key(config, tmp_path):
    assert config.resource.state_dir == tmp_path / "state"
    state = tmp_path / "a-file"
    state.write_text("")
    host_toml = tmp_path / "host.toml"
    host_toml.write_text(
        host_toml.read_text().replace(str(tmp_path / "state"), str(state)), encoding="utf-8"
    )
    bad = load_host_config(host_toml)

    async def main():
        async with Node.open(bad):
            pass

    with pytest.raises(ConfigError) as info:
        asyncio.run(main())
    assert info.value.key == "resource.state-dir"
    assert str(state) in str(info.value)
    assert "host.toml" in str(info.value)
