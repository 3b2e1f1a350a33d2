"""The launcher forked from the runtime's process: what the workload inherits (the default
signal actions, no descriptor of the runtime's process), that a signal sent to a launcher
waiting for its plan never reaches the runtime's own handlers, and that a launcher whose
process is killed exits without running anything."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from accelkit.runtime import LaunchSpec, WorkloadHandle
from accelkit.runtime.launcher import EXIT_ABORTED
from accelkit.runtime.process import ProcessRuntime
from accelkit.runtime.process_tree import ProcessTree
from accelkit.runtime.render.process import ProcessPlan
from accelkit.types import AgentId, WorkloadConfig

pytestmark = [
    pytest.mark.slow,  # real processes
    pytest.mark.skipif(os.geteuid() != 0, reason="the process runtime's cgroups need root"),
]

AGENT = AgentId("agent-1")
SHOW = "grep -E '^(SigIgn|SigBlk)' /proc/self/status; ls /proc/self/fd"


@pytest.fixture
def runtime() -> Iterator[ProcessRuntime]:
    made = ProcessRuntime(pids_max=512)
    yield made
    asyncio.run(made.close())


async def _run(runtime: ProcessRuntime, argv: list[str]) -> WorkloadHandle:
    """Run ``argv`` to its end as a workload of ``runtime``; its handle."""
    workload = await runtime.new_workload(AGENT)
    spec = LaunchSpec(AGENT, workload, argv, WorkloadConfig(), base_env=os.environ)
    handle = await runtime.create(spec)
    try:
        await runtime.start(handle)
        assert await runtime.wait(handle) == 0
    finally:
        await runtime.stop(handle, 0)
    return handle


def test_the_workload_gets_default_signal_actions_and_no_descriptor_of_this_process(
    runtime, tmp_path
):
    """Python ignores SIGPIPE and SIGXFSZ, an event loop handles SIGTERM and the runtime's
    process holds files (a ledger, a lock) a workload must not keep: none of it reaches the
    workload, as none of it reached an interpreter started by ``subprocess``."""
    out = tmp_path / "out"
    kept = os.open(tmp_path / "held", os.O_WRONLY | os.O_CREAT)
    os.set_inheritable(kept, True)  # even one a child would inherit

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, lambda: None)
        try:
            await _run(runtime, ["sh", "-c", f"{{ {SHOW}; }} > {out}"])
        finally:
            loop.remove_signal_handler(signal.SIGTERM)

    try:
        asyncio.run(main())
    finally:
        os.close(kept)
    lines = out.read_text().split()
    assert lines[lines.index("SigIgn:") + 1] == "0" * 16  # SIGPIPE and SIGXFSZ at default
    assert lines[lines.index("SigBlk:") + 1] == "0" * 16
    descriptors = set(lines) - {"SigIgn:", "SigBlk:", "0" * 16}
    assert descriptors <= {"0", "1", "2", "3"}  # 3: the directory ls reads


def test_a_signal_sent_to_a_waiting_launcher_never_reaches_this_process():
    """The launcher shares this process's handlers and event loop wake-up until it clears
    them: a SIGUSR1 sent to it takes the default action (it ends) and no handler here runs."""
    seen: list[int] = []

    async def main() -> int:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGUSR1, seen.append, 1)
        previous = signal.signal(signal.SIGUSR2, lambda n, _f: seen.append(n))
        try:
            tree = await ProcessTree.start()
            os.kill(tree.pid, signal.SIGUSR2)
            status = await tree.wait()
            second = await ProcessTree.start()
            os.kill(second.pid, signal.SIGUSR1)
            assert await second.wait() == 128 + signal.SIGUSR1
            await asyncio.sleep(0)  # a wake-up written by the launcher would be read now
            return status
        finally:
            loop.remove_signal_handler(signal.SIGUSR1)
            signal.signal(signal.SIGUSR2, previous)

    assert asyncio.run(main()) == 128 + signal.SIGUSR2
    assert seen == []


def test_a_launcher_forked_beside_busy_threads_runs_its_command(tmp_path):
    """Other threads of this process (plugin workers, the ledger's queue) may be anywhere
    when it forks: the launcher takes none of their locks."""
    stop = threading.Event()

    def busy() -> None:
        while not stop.is_set():
            Path(tmp_path / "x").write_text("x")  # I/O, allocation, the GIL handed around

    threads = [threading.Thread(target=busy) for _ in range(3)]
    for thread in threads:
        thread.start()

    async def main() -> list[int]:
        statuses = []
        for _ in range(20):
            tree = await ProcessTree.start(contain=os.geteuid() == 0)
            tree.launch(["true"], ProcessPlan(env={}), contain=os.geteuid() == 0)
            statuses.append(await tree.wait())
        return statuses

    try:
        assert asyncio.run(main()) == [0] * 20
    finally:
        stop.set()
        for thread in threads:
            thread.join()


PARENT = """
import asyncio, sys
from accelkit.runtime.process_tree import ProcessTree

async def main():
    tree = await ProcessTree.start()
    print(tree.pid, flush=True)
    sys.stdin.read()  # until killed

asyncio.run(main())
"""

#: becomes the subreaper of the runtime's process, so the orphaned launcher is its child to reap
REAPER = """
import ctypes, os, signal, subprocess, sys
assert ctypes.CDLL(None).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
parent = subprocess.Popen(
    [sys.executable, "-c", sys.argv[1]], stdin=subprocess.PIPE, stdout=subprocess.PIPE
)
waiting = int(parent.stdout.readline())
os.kill(parent.pid, signal.SIGKILL)
parent.wait()
_, status = os.waitpid(waiting, 0)  # reparented to this process when its parent died
print(waiting, os.waitstatus_to_exitcode(status))
"""


def test_a_launcher_whose_process_is_killed_exits_without_running_anything():
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(REAPER), textwrap.dedent(PARENT)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    waiting, status = done.stdout.split()
    assert int(waiting) > 0
    assert int(status) == EXIT_ABORTED  # an empty plan: nothing was executed
