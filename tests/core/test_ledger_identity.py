"""The ledger's identity (made once, kept) and the container engines it notes; a ledger that
never ran a container sweeps nothing and asks no engine."""

from __future__ import annotations

import asyncio
import re
import socket
import sqlite3
import threading
from decimal import Decimal
from pathlib import Path

from accelkit.runtime.docker import DockerRuntime
from accelkit.types import AgentId, DeviceName, Workload
from accelkit.workload import Ledger, LedgerRecord
from accelkit.workload.orphans import (
    SweepReport,
    container_engines,
    note_container_engine,
    sweep_orphans,
)

HEX32 = re.compile(r"^[0-9a-f]{32}$")


def record(workload: str = "pid:1") -> LedgerRecord:
    allocation = {DeviceName("cpu"): {"cpu": {"0": Decimal(1)}}}
    return LedgerRecord(
        AgentId("agent-1"), Workload.process_tree(workload), allocation, (DeviceName("cpu"),)
    )


def test_a_ledger_gets_a_random_identity_that_it_keeps(tmp_path):
    first = Ledger(tmp_path / "a")
    made = first.ledger_id
    assert HEX32.match(made)
    first.write(record())
    first.close()
    assert Ledger(tmp_path / "a").ledger_id == made  # reopened: the same
    assert Ledger(tmp_path / "b").ledger_id != made  # another state dir: another one


def test_a_ledger_made_before_identities_gets_one_on_first_open_and_keeps_its_records(tmp_path):
    old = Ledger(tmp_path)
    old.write(record())
    old.close()
    with sqlite3.connect(tmp_path / "ledger.db") as db:  # as an accelkit of before left it
        db.execute("DROP TABLE identity")
    (tmp_path / "ledger.id").unlink()  # which did not write this either
    reopened = Ledger(tmp_path)
    made = reopened.ledger_id
    assert HEX32.match(made)
    assert list(reopened.scan().records) == [record().key]
    reopened.close()
    assert Ledger(tmp_path).ledger_id == made


def test_processes_opening_a_new_ledger_at_once_agree_on_its_identity(tmp_path):
    seen: list[str] = []
    start = threading.Barrier(8)

    def open_it() -> None:
        start.wait()
        seen.append(Ledger(tmp_path).ledger_id)

    threads = [threading.Thread(target=open_it) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 8
    assert len(set(seen)) == 1


def _engine_socket(path: Path) -> str:
    """The address of a unix socket that exists at ``path`` (an engine there, once)."""
    with socket.socket(socket.AF_UNIX) as engine:
        engine.bind(str(path))
    return f"unix://{path}"


def test_container_engines_are_noted_once_and_kept(tmp_path):
    ledger = Ledger(tmp_path)
    assert container_engines(ledger) == []
    here = _engine_socket(tmp_path / "docker.sock")
    note_container_engine(ledger, here)
    note_container_engine(ledger, here)
    note_container_engine(ledger, "tcp://127.0.0.1:2375")
    ledger.close()
    assert container_engines(Ledger(tmp_path)) == ["tcp://127.0.0.1:2375", here]


def test_an_engine_without_a_socket_is_not_noted(tmp_path):
    # nothing can be made there; a note would have every later sweep warn about it
    ledger = Ledger(tmp_path)
    note_container_engine(ledger, f"unix://{tmp_path}/nowhere.sock")
    assert container_engines(ledger) == []


def test_a_ledger_that_never_ran_a_container_asks_no_engine(tmp_path):
    runtime = DockerRuntime(f"unix://{tmp_path}/never-asked.sock")
    report = asyncio.run(sweep_orphans(Ledger(tmp_path), runtime, min_age=0))
    assert report == SweepReport()
    assert runtime._ops == {}  # no client was even made


def test_an_engine_whose_socket_is_gone_is_a_problem_not_an_error(tmp_path):
    ledger = Ledger(tmp_path)
    note_container_engine(ledger, _engine_socket(tmp_path / "gone.sock"))
    (tmp_path / "gone.sock").unlink()  # the engine went away since
    runtime = DockerRuntime(f"unix://{tmp_path}/gone.sock")
    report = asyncio.run(sweep_orphans(ledger, runtime, min_age=0))
    assert report.removed == ()
    assert report.problems == (
        f"cannot reach the Docker engine at unix://{tmp_path}/gone.sock: no socket "
        f"{tmp_path}/gone.sock; orphan containers there were not looked for",
    )
