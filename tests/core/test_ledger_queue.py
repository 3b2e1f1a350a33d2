"""Writers take turns: a process waiting for the ledger gets it before its holder gets it again."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from accelkit.workload import Ledger
from accelkit.workload.ledger_queue import WriterQueue

PRELUDE = """
import sys
from decimal import Decimal
from accelkit.types import AgentId, DeviceName, Workload
from accelkit.workload import Ledger, LedgerRecord

def record(name):
    return LedgerRecord(
        AgentId("agent-1"),
        Workload.process_tree(name),
        allocation={DeviceName("cpu"): {"cpu": {"0": Decimal(1)}}},
        order=(DeviceName("cpu"),),
    )

ledger = Ledger(sys.argv[1])
"""

HOLDER = (
    PRELUDE
    + """
with ledger.transaction():
    ledger.write(record("pid:1"))
    print("holding", flush=True)
    sys.stdin.readline()
with ledger.transaction():  # at once again: the waiter must come first
    ledger.write(record("pid:3"))
"""
)

WAITER = (
    PRELUDE
    + """
ledger.scan()  # opened (which takes the lock once) before the holder holds it
print("open", flush=True)
sys.stdin.readline()
with ledger.transaction():
    ledger.write(record("pid:2"))
"""
)

WAIT_S = 60.0  # for the waiter to queue; a bound, not a timing


def _queued(pid: int) -> bool:
    """Whether ``pid`` waits for a lock (a ``->`` line of /proc/locks)."""
    return any(
        "->" in line and f" {pid} " in line for line in Path("/proc/locks").read_text().splitlines()
    )


def test_a_waiting_process_writes_before_the_holder_writes_again(tmp_path: Path) -> None:
    Ledger(tmp_path).scan()  # the database, made before the two processes open it

    def start(script: str) -> subprocess.Popen[str]:
        argv = [sys.executable, "-c", script, str(tmp_path)]
        return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    waiter = start(WAITER)
    holder = None
    try:
        assert waiter.stdout is not None
        assert waiter.stdin is not None
        assert waiter.stdout.readline().strip() == "open"
        holder = start(HOLDER)
        assert holder.stdout is not None
        assert holder.stdin is not None
        assert holder.stdout.readline().strip() == "holding"
        waiter.stdin.write("\n")
        waiter.stdin.flush()
        deadline = time.monotonic() + WAIT_S
        while not _queued(waiter.pid):
            assert waiter.poll() is None, "the waiter wrote while the holder held the ledger"
            assert time.monotonic() < deadline, "the waiter never queued for the ledger's lock"
            time.sleep(0.01)
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.wait() == 0
        assert waiter.wait() == 0
    finally:
        for p in (holder, waiter):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    seqs = dict(Ledger(tmp_path).db.execute("SELECT workload, seq FROM records").fetchall())
    assert seqs["pid:1"] < seqs["pid:2"] < seqs["pid:3"]


def test_a_second_ledger_of_the_same_process_does_not_queue_behind_the_first(
    tmp_path: Path,
) -> None:
    first, second = Ledger(tmp_path), Ledger(tmp_path)
    first.scan()
    with first.transaction():
        # the queue lets the second object through to SQLite's lock (no wait on ourselves);
        # a write there would wait for the first to commit, as without the queue
        queue = second._writer_queue()
        assert queue is not None
        queue.enter(WAIT_S)
        queue.leave()
    with second.transaction():  # and the first object's leaving did not take it away
        pass


STOPPED_HOLDER = (
    PRELUDE
    + """
import fcntl, os
fd = os.open(os.path.join(sys.argv[1], "ledger.lock"), os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)  # as a writer stopped inside its transaction holds it
print("holding", flush=True)
sys.stdin.readline()
"""
)


def test_a_holder_that_never_lets_go_bounds_the_wait_and_the_lock_comes_back(
    tmp_path: Path,
) -> None:
    """A writer stopped while holding (SIGSTOP) keeps nobody waiting past the bound; a waiter
    that left the queue hands the lock on when it comes, so the queue still works after."""
    Ledger(tmp_path).scan()
    holder = subprocess.Popen(
        [sys.executable, "-c", STOPPED_HOLDER, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert holder.stdout is not None
        assert holder.stdin is not None
        assert holder.stdout.readline().strip() == "holding"
        queue = WriterQueue.open(fd)
        assert queue is not None
        queue.enter(0.05)  # returns, without the lock: the holder still has it
        assert queue._holding is False
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.wait(timeout=WAIT_S) == 0
        deadline = time.monotonic() + WAIT_S  # the left-behind waiter takes and hands it on
        while True:
            queue.enter(WAIT_S)
            if queue._holding:
                break
            assert time.monotonic() < deadline
        queue.close()
    finally:
        os.close(fd)
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_a_state_dir_where_the_queue_cannot_be_made_has_none(tmp_path: Path) -> None:
    import os

    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        (tmp_path / "ledger.lock").mkdir()  # not a file: it cannot be opened for writing
        assert WriterQueue.open(fd) is None
    finally:
        os.close(fd)


@pytest.mark.parametrize("error", [KeyboardInterrupt, RuntimeError])
def test_a_transaction_that_raises_hands_the_lock_on(tmp_path: Path, error: type) -> None:
    ledger = Ledger(tmp_path)
    with pytest.raises(error), ledger.transaction():
        raise error
    other = subprocess.run(
        [sys.executable, "-c", WAITER, str(tmp_path)],
        input="\n",
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )
    assert other.returncode == 0


def _waiters() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "ledger-queue"]


def test_waits_are_made_by_one_thread_started_once_and_ended_with_the_queue(
    tmp_path: Path,
) -> None:
    Ledger(tmp_path).scan()
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    before = set(_waiters())
    try:
        queue = WriterQueue.open(fd)
        assert queue is not None
        for _ in range(3):  # the lock taken elsewhere each time: every enter waits
            holder = subprocess.Popen(
                [sys.executable, "-c", STOPPED_HOLDER, str(tmp_path)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert holder.stdout is not None
            assert holder.stdin is not None
            assert holder.stdout.readline().strip() == "holding"
            queue.enter(0.05)  # the holder keeps it: the wait is given up
            assert queue._holding is False
            holder.stdin.write("\n")
            holder.stdin.flush()
            assert holder.wait(timeout=WAIT_S) == 0
            queue.enter(WAIT_S)  # the given-up wait hands the lock on, this one takes it
            assert queue._holding is True
            queue.leave()
        [waiter] = set(_waiters()) - before
        queue.close()
        waiter.join(WAIT_S)
        assert not waiter.is_alive()
    finally:
        os.close(fd)
