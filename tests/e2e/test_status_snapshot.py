"""``accelkit status`` reads each record once and checks each process it names once.

The node's opening reconciliation judges every record; the command shows that judgement (with
what the reconciliation finished since, read incrementally) instead of reconciling, scanning
and asking every process again. The JSON and the table come from that one snapshot.
"""

from __future__ import annotations

import asyncio
import json
import os
from decimal import Decimal
from pathlib import Path

import pytest

from accelkit.cli.app import main
from accelkit.config import load_host_config
from accelkit.node import Node
from accelkit.types import AgentId, SlotName, Workload
from accelkit.workload import ProcessStamp, ledger

LIVE = 12
AGENT = AgentId("agent-1")


async def _book(config: Path) -> None:
    """LIVE workloads led and owned by this process, and one whose leader is gone (this
    pid with another start time) and that nobody manages."""
    stamp = ProcessStamp.of(os.getpid())
    async with Node.open(load_host_config(config)) as node:
        for i in range(LIVE):
            slots = {SlotName("cpu"): Decimal(1)}
            await node.book(AGENT, Workload.process_tree(f"live-{i:02d}"), slots, leader=stamp)
        record = await node.book(
            AGENT,
            Workload.process_tree("dead"),
            {SlotName("cpu"): Decimal(1)},
            leader=ProcessStamp(os.getpid(), "1.0"),
        )
        node.bookkeeper.hand_over(record.key)


@pytest.fixture
def booked(mock_node) -> Path:
    config = mock_node(cpus=LIVE + 1)
    asyncio.run(_book(config))
    return config


@pytest.fixture
def counted(monkeypatch) -> dict[str, int]:
    """How many records were parsed and how many process checks were made."""
    counts = {"parsed": 0, "checked": 0}
    parse, is_running = ledger.parse_record, ProcessStamp.is_running

    def counting_parse(body: str | bytes) -> object:
        counts["parsed"] += 1
        return parse(body)

    def counting_check(self: ProcessStamp) -> bool:
        counts["checked"] += 1
        return is_running(self)

    monkeypatch.setattr(ledger, "parse_record", counting_parse)
    monkeypatch.setattr(ProcessStamp, "is_running", counting_check)
    return counts


@pytest.mark.parametrize("args", [["--json"], []], ids=["json", "table"])
def test_each_record_is_read_once_and_each_workload_checked_once(booked, counted, capsys, args):
    assert main(["status", "--config", str(booked), *args]) == 0
    out = capsys.readouterr()
    # the live records and the dead one, each parsed once; the dead one is then finished
    assert counted["parsed"] == LIVE + 1
    # each process once: the live workloads' one owner, this process (it runs: managed), and
    # the dead one's leader (no owner)
    assert counted["checked"] == 2
    assert "finished the teardown of dead workload 'dead'" in out.err
    if args:
        shown = json.loads(out.out)
        assert [w["workload"] for w in shown] == [f"live-{i:02d}" for i in range(LIVE)]
        assert {(w["liveness"], w["owner_alive"]) for w in shown} == {("managed", True)}
    else:
        lines = out.out.splitlines()
        assert [line.split()[0] for line in lines[2:]] == [f"live-{i:02d}" for i in range(LIVE)]
        assert all(line.split()[4] == "managed" for line in lines[2:])


def test_a_record_written_after_the_opening_reconciliation_is_shown(booked):
    """``reconcile=False`` adds what changed since the judgement: a booking made meanwhile."""

    async def scenario() -> list[str]:
        async with Node.open(load_host_config(booked)) as node:
            stamp = ProcessStamp.of(os.getpid())
            slots = {SlotName("cpu"): Decimal(1)}
            await node.book(AGENT, Workload.process_tree("later"), slots, leader=stamp)
            return [s.workload_id for s in await node.status(reconcile=False)]

    shown = asyncio.run(scenario())
    assert shown == ["later", *(f"live-{i:02d}" for i in range(LIVE))]  # sorted by id


def test_the_collector_is_paused_for_the_snapshot_and_resumed_after(booked, monkeypatch):
    """The snapshot's objects all live until it is printed: no collection runs meanwhile, and
    the collector runs again once the command is done, even when it fails."""
    import gc

    from accelkit.workload import operator_status

    seen: list[bool] = []
    judged = operator_status.records_judged

    async def watching(keeper: object, *, reconcile: bool = True) -> object:
        seen.append(gc.isenabled())
        return await judged(keeper, reconcile=reconcile)  # type: ignore[arg-type]

    monkeypatch.setattr(operator_status, "records_judged", watching)
    assert gc.isenabled()
    assert main(["status", "--config", str(booked), "--json"]) == 0
    assert main(["status", "--config", str(booked), "--agent", "nobody"]) == 2
    assert seen == [False, False]
    assert gc.isenabled()


def test_the_objects_left_at_exit_are_frozen_once_not_collected(booked, tmp_path):
    """The process that ran the command freezes what is left before its exit's collections
    (nothing needs collecting then): its last collection traverses no object of the run."""
    import subprocess
    import sys

    probe = tmp_path / "probe.py"
    probe.write_text(
        "import atexit, gc, os, sys\n"
        "from accelkit.cli.app import main\n"
        # runs after the command's exit callbacks (last in, first out): what is frozen then
        "atexit.register(lambda: os.write(2, b'frozen=%d' % gc.get_freeze_count()))\n"
        "for _ in range(2):\n"
        "    assert main(['status', '--config', sys.argv[1], '--json']) == 0\n"
        "assert gc.get_freeze_count() == 0 and gc.isenabled()  # frozen only at exit\n"
    )
    done = subprocess.run(
        [sys.executable, str(probe), str(booked)],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert int(done.stderr.rpartition("frozen=")[2]) > 10_000
