"""The launcher a process runtime keeps ready for its next workload: when a workload takes it,
when it does not (it was started with what a launcher started now would not get), and that it
never outlives the runtime nor its process, nor runs anything when that process dies."""

from __future__ import annotations

import asyncio
import os
import resource
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from accelkit.runtime import launcher
from accelkit.runtime.launcher import EXIT_ABORTED
from accelkit.runtime.process import ProcessRuntime

from .workload_runs import run_to_end

pytestmark = [
    pytest.mark.slow,  # real processes
    pytest.mark.skipif(os.geteuid() != 0, reason="the process runtime's cgroups need root"),
]


@pytest.fixture
def runtime() -> Iterator[ProcessRuntime]:
    made = ProcessRuntime(pids_max=512)
    yield made
    asyncio.run(made.close())


def _gone(pid: int) -> bool:
    """Whether ``pid`` is neither running nor a zombie of this process."""
    try:
        process = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return True
    return process.ppid() != os.getpid() and pid not in [c.pid for c in psutil.Process().children()]


def _chdir(tmp_path: Path) -> Callable[[], None]:
    before = os.getcwd()
    os.chdir(tmp_path)
    return lambda: os.chdir(before)


def _umask(_: Path) -> Callable[[], None]:
    before = os.umask(0o077)
    return lambda: os.umask(before)


#: one below this process's open-files limit: a change the launcher must see that still leaves
#: the test process, which may hold hundreds of files late in a long run, room for its own
LOWERED_NOFILE = resource.getrlimit(resource.RLIMIT_NOFILE)[0] - 1


def _nofile(_: Path) -> Callable[[], None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (LOWERED_NOFILE, hard))
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.parametrize(
    ("change", "expected"),
    [(_chdir, "{tmp}"), (_umask, "0077"), (_nofile, str(LOWERED_NOFILE))],
    ids=["working-directory", "umask", "open-files-limit"],
)
def test_a_spare_started_before_a_change_is_not_used(runtime, tmp_path, change, expected):
    """The workload gets what a launcher started now gets; the stale spare is ended."""
    out = tmp_path / "out"
    script = 'pwd > "$0"; umask >> "$0"; ulimit -n >> "$0"'

    async def main() -> tuple[int | None, str]:
        await run_to_end(runtime, ["true"])
        await run_to_end(runtime, ["true"])
        spare = runtime.spare_launcher
        undo = change(tmp_path)
        try:
            handle = await run_to_end(runtime, ["sh", "-c", script, str(out)])
        finally:
            undo()
        assert handle.details["leader_pid"] != str(spare)
        return spare, out.read_text()

    spare, seen = asyncio.run(main())
    assert spare is not None
    assert expected.format(tmp=tmp_path) in seen.splitlines()
    assert _gone(spare)  # killed and reaped, not left waiting


def test_an_unchanged_process_takes_its_spare_and_close_reaps_the_next(runtime):
    async def main() -> tuple[int | None, str, int | None]:
        await run_to_end(runtime, ["true"])
        await run_to_end(runtime, ["true"])
        spare = runtime.spare_launcher
        handle = await run_to_end(runtime, ["true"])
        kept = runtime.spare_launcher
        await runtime.close()
        return spare, handle.details["leader_pid"], kept

    spare, leader, kept = asyncio.run(main())
    assert leader == str(spare)
    assert kept is not None
    assert kept != spare
    assert runtime.spare_launcher is None
    assert _gone(kept)  # no zombie, no stray launcher


PARENT = """
import asyncio, os, psutil, sys
from accelkit.runtime import LaunchSpec
from accelkit.runtime.process import ProcessRuntime
from accelkit.types import AgentId, WorkloadConfig

async def main():
    runtime = ProcessRuntime()
    for _ in range(2):
        workload = await runtime.new_workload(AgentId("agent-1"))
        spec = LaunchSpec(AgentId("agent-1"), workload, ["true"], WorkloadConfig(), os.environ)
        handle = await runtime.create(spec)
        await runtime.start(handle)
        await runtime.wait(handle)
        await runtime.stop(handle, 0)
    spare = runtime.spare_launcher
    servers = [p.pid for p in psutil.Process().children() if p.pid != spare]
    print(spare, *servers, flush=True)
    sys.stdin.read()  # until killed

asyncio.run(main())
"""

#: becomes the subreaper of the runtime's process: the orphaned spare and fork server are its
#: children to reap
REAPER = """
import ctypes, os, signal, subprocess, sys
assert ctypes.CDLL(None).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
parent = subprocess.Popen(
    [sys.executable, "-c", sys.argv[1]], stdin=subprocess.PIPE, stdout=subprocess.PIPE
)
spare, *servers = map(int, parent.stdout.readline().split())
os.kill(parent.pid, signal.SIGKILL)
parent.wait()
for pid in (spare, *servers):  # reparented to this process when their parent died
    _, status = os.waitpid(pid, 0)
    print(pid, os.waitstatus_to_exitcode(status))
"""


def test_a_spare_whose_process_is_killed_exits_without_running_anything():
    """The spare sees its plan pipe close, the fork server its socket: both end, and the spare
    runs nothing."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(REAPER), textwrap.dedent(PARENT)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (spare, status), *servers = [line.split() for line in done.stdout.splitlines()]
    assert int(spare) > 0
    assert int(status) == EXIT_ABORTED  # an empty plan: nothing was executed
    if launcher.CLONE_SYSCALLS.get(os.uname().machine) is not None:
        assert [int(code) for _, code in servers] == [0]  # the server, at its socket's end
