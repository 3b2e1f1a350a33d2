"""One judgement of the ledger checks each process stamp once, however many records name it,
and judges every record as its own stamps say."""

from __future__ import annotations

import asyncio
import os
import subprocess
from decimal import Decimal

import pytest

from accelkit.types import AgentId, DeviceName, SlotName, Workload
from accelkit.workload import Ledger, LedgerRecord, ProcessStamp
from accelkit.workload.liveness import Liveness, RunningMemo
from accelkit.workload.reconcile import Reconciler

AGENT = AgentId("agent-1")
DEAD = ProcessStamp(os.getpid(), "1")  # our pid with another start time: a gone process


def _record(name: str, owner: ProcessStamp | None, leader: ProcessStamp | None) -> LedgerRecord:
    alloc = {DeviceName("cpu"): {SlotName("cpu"): {"0": Decimal(1)}}}
    return LedgerRecord(
        AGENT, Workload.process_tree(name), alloc, order=(DeviceName("cpu"),), owner=owner,
        leader=leader,
    )  # fmt: skip


def _count_checks(monkeypatch: pytest.MonkeyPatch) -> list[ProcessStamp]:
    """The stamps whose liveness is checked from now on, in order, each time it is."""
    checked: list[ProcessStamp] = []
    is_running = ProcessStamp.is_running

    def counting(self: ProcessStamp) -> bool:
        checked.append(self)
        return is_running(self)

    monkeypatch.setattr(ProcessStamp, "is_running", counting)
    return checked


@pytest.fixture
def other():
    """A live process other than this one: its stamp."""
    proc = subprocess.Popen(["sleep", "600"])
    stamp = ProcessStamp.of(proc.pid)
    assert stamp is not None
    yield stamp
    proc.kill()
    proc.wait()


def test_each_stamp_is_checked_once_and_each_record_judged_by_its_own(tmp_path, monkeypatch, other):
    me = ProcessStamp.of(os.getpid())
    assert me is not None
    records = {
        r.key: r
        for r in [
            *(_record(f"mine-{i}", me, me) for i in range(5)),  # owned by a live process
            *(_record(f"led-{i}", DEAD, other) for i in range(3)),  # owner gone, leader runs
            *(_record(f"dead-{i}", DEAD, DEAD) for i in range(4)),  # both gone
            _record("never-led", None, None),  # a process tree that never got a leader
        ]
    }
    checked = _count_checks(monkeypatch)
    reconciler = Reconciler(Ledger(tmp_path), {})
    states, problems = asyncio.run(reconciler.judge(records, frozenset()))
    assert sorted(checked, key=repr) == sorted([me, DEAD, other], key=repr)  # once each
    assert problems == []
    expected = {
        "mine": Liveness.MANAGED,
        "led": Liveness.RUNNING,
        "dead": Liveness.GONE,
        "never": Liveness.GONE,
    }
    assert states == {k: expected[k[1].split("-")[0]] for k in records}


def test_a_memo_asks_again_in_the_next_judgement():
    """A memo lives for one judgement: a process that ended since is gone in the next."""
    proc = subprocess.Popen(["sleep", "600"])
    stamp = ProcessStamp.of(proc.pid)
    assert stamp is not None
    first, second = RunningMemo(), RunningMemo()
    assert first(stamp)
    proc.kill()
    proc.wait()
    assert first(stamp)  # this judgement's answer stays what it saw
    assert not second(stamp)


def test_a_stamp_and_an_equal_one_are_checked_once_whichever_is_asked(monkeypatch):
    """Records read from the ledger share a stamp object; one made apart (equal, another
    object) is found by its value: one check for both, asked in any order."""
    me = ProcessStamp.of(os.getpid())
    assert me is not None
    twin = ProcessStamp(me.pid, me.start_time)
    assert twin == me
    assert twin is not me
    checked = _count_checks(monkeypatch)
    memo = RunningMemo()
    assert [memo(twin), memo(me), memo(twin), memo(me)] == [True] * 4
    assert checked == [twin]
    assert not memo(DEAD)
    assert not memo(ProcessStamp(DEAD.pid, DEAD.start_time))
    assert checked == [twin, DEAD]
