"""Which ledger commits are synced to disk: the intents of ``pre_create`` and the release.

A commit made with ``durable=False`` survives the death of its process (``kill -9``) like any
other; only a power loss may undo it, and the next durable commit makes it durable too. A run of
``true`` syncs the ledger exactly ``plugins + 1`` times: the intent of each plugin's
``pre_create`` (which also syncs the booking before it) and the release (which syncs every
result, handle and later intent before it), counted with ``strace`` where it is installed.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from decimal import Decimal
from pathlib import Path

import pytest

from accelkit.config import load_host_config
from accelkit.errors import ConfigError
from accelkit.node import Node
from accelkit.types import AgentId, DeviceName, SlotName, Workload
from accelkit.workload import Ledger, LedgerRecord


def record(workload: str = "pid:42") -> LedgerRecord:
    return LedgerRecord(
        AgentId("agent-1"),
        Workload.process_tree(workload),
        allocation={DeviceName("cpu"): {"cpu": {"0": Decimal(1)}}},
        order=(DeviceName("cpu"),),
    )


def _synced(monkeypatch) -> list[bool]:
    """For each WAL sync from now on: whether another process could take the lock then."""
    calls: list[bool] = []
    original = os.fdatasync

    def fdatasync(fd: int) -> None:
        calls.append(_lock_free())
        original(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    return calls


LOCK_PATH: list[Path] = []


def _lock_free() -> bool:
    fd = os.open(LOCK_PATH[0], os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    finally:
        os.close(fd)


def _write_then_fail(ledger: Ledger) -> None:
    with ledger.transaction():
        ledger.write(record("pid:43"))
        msg = "undone"
        raise RuntimeError(msg)


def test_a_durable_commit_syncs_the_wal_once_the_lock_is_handed_on(tmp_path, monkeypatch):
    ledger = Ledger(tmp_path)
    ledger.write(record("pid:1"))  # the database, the lock files and the WAL exist
    LOCK_PATH[:] = [tmp_path / "ledger.lock"]
    synced = _synced(monkeypatch)
    ledger.write(record(), durable=False)
    assert synced == []
    ledger.scan()  # a transaction that only reads: nothing to sync
    assert not ledger.remove("agent-1", "pid:999")
    assert synced == []
    ledger.write(record("pid:44"))
    assert synced == [True]  # after the commit, the lock free for the others
    with pytest.raises(RuntimeError, match="undone"):
        _write_then_fail(ledger)
    assert synced == [True]  # nothing committed, nothing to sync
    assert set(Ledger(tmp_path).read_all()) == {
        ("agent-1", "pid:1"),
        ("agent-1", "pid:42"),
        ("agent-1", "pid:44"),
    }


def test_a_nested_block_follows_the_outermost(tmp_path, monkeypatch):
    ledger = Ledger(tmp_path)
    ledger.write(record("pid:1"))
    LOCK_PATH[:] = [tmp_path / "ledger.lock"]
    synced = _synced(monkeypatch)
    with ledger.transaction(durable=False):
        ledger.write(record())  # durable by default, but inside a block that is not
    assert synced == []
    with ledger.transaction():
        ledger.write(record("pid:43"), durable=False)
    assert synced == [True]


def test_a_wal_that_cannot_be_synced_is_an_error_naming_the_ledger(tmp_path, monkeypatch):
    ledger = Ledger(tmp_path)
    ledger.write(record("pid:1"))

    def broken(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", broken)
    with pytest.raises(ConfigError, match=r"ledger\.db'?: cannot sync it to disk: .*Input/output"):
        ledger.write(record())


WRITER = """
import os, sys
from decimal import Decimal
from accelkit.types import AgentId, DeviceName, Workload
from accelkit.workload import Ledger, LedgerRecord
ledger = Ledger(sys.argv[1])
ledger.write(
    LedgerRecord(
        AgentId("agent-1"),
        Workload.process_tree("pid:7"),
        allocation={DeviceName("cpu"): {"cpu": {"0": Decimal(1)}}},
        order=(DeviceName("cpu"),),
    ),
    durable=False,
)
print("written", flush=True)
sys.stdin.read()  # killed here
"""


def test_a_commit_that_is_not_durable_survives_kill_9_of_its_process(tmp_path):
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None
        assert writer.stdout.readline().strip() == "written"
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    assert set(Ledger(tmp_path).read_all()) == {("agent-1", "pid:7")}


RUNS = """
import asyncio, os, sys
from decimal import Decimal
from accelkit.config import load_host_config
from accelkit.errors import ConfigError
from accelkit.node import Node
from accelkit.types import AgentId, SlotName

async def main():
    async with Node.open(load_host_config(sys.argv[1])) as node:
        await node.run(AgentId("agent-1"), {SlotName("cpu"): Decimal(1)}, ["true"])
        os.write(2, b"START\\n")
        for _ in range(3):
            assert await node.run(AgentId("agent-1"), {SlotName("cpu"): Decimal(1)}, ["true"]) == 0
        os.write(2, b"END\\n")

asyncio.run(main())
"""


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_a_run_syncs_the_ledger_for_each_pre_create_intent_and_the_release_only(
    mock_node, tmp_path: Path
):
    config = mock_node(cpus=1)
    trace = tmp_path / "trace"
    subprocess.run(
        [
            *("strace", "-f", "-e", "trace=fdatasync,fsync,write", "-o", str(trace)),
            *(sys.executable, "-c", textwrap.dedent(RUNS), str(config)),
        ],
        check=True,
        capture_output=True,
    )
    lines = trace.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if '"START\\n"' in line)
    end = next(i for i, line in enumerate(lines) if '"END\\n"' in line)
    syncs = [line for line in lines[start:end] if "fdatasync(" in line or "fsync(" in line]
    # the intent of pre_create of "cpu", the release: two of at most three per run
    assert len(syncs) == 3 * (1 + 1)


def test_a_run_writes_its_device_rows_once_and_four_times_in_all(mock_node):
    statements: list[str] = []

    async def main() -> int:
        async with Node.open(load_host_config(mock_node(cpus=1))) as node:
            db = node.bookkeeper.ledger.db
            db.set_trace_callback(statements.append)
            try:
                return await node.run(AgentId("agent-1"), {SlotName("cpu"): Decimal(1)}, ["true"])
            finally:
                db.set_trace_callback(None)

    assert asyncio.run(main()) == 0
    # the phases, the handle and the leader change the record's row only
    assert sum(s.startswith("INSERT INTO holdings") for s in statements) == 1
    assert sum(s.startswith("INSERT INTO held") for s in statements) == 1
    # the handle (with pre_create's result), post_create's result
    assert sum(s.startswith("UPDATE records") for s in statements) == 2
    # the booking with pre_create's intent, the handle, post_create (the mock's hook keeps the
    # base class's empty post_create, pre_terminate and post_terminate: no intent, no call),
    # the release
    assert sum(s == "BEGIN IMMEDIATE" for s in statements) == 4
