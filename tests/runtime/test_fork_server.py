"""The launchers' fork server: its clones are this process's children and run plans as started
launchers do; a server that fails or is ended leaves no process, and launchers are then started
directly; a server started with other inheritance is replaced."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from accelkit.runtime import launcher
from accelkit.runtime.fork_server import ClonedLauncher, ForkServer
from accelkit.runtime.process import ProcessRuntime
from accelkit.runtime.process_tree import CommandNotRunnable, launcher_code
from accelkit.runtime.render.process import ProcessPlan

from .workload_runs import run_to_end

pytestmark = [
    pytest.mark.slow,  # real processes
    pytest.mark.skipif(
        launcher.CLONE_SYSCALLS.get(os.uname().machine) is None,
        reason=f"launchers are not cloned on {os.uname().machine}",
    ),
]

PLAN = ProcessPlan(env={"PATH": os.defpath})


@pytest.fixture
def server() -> Iterator[ForkServer]:
    made = ForkServer.start(contain=False)
    assert made is not None
    yield made
    made.close()


def test_a_clone_is_this_processs_child_and_runs_its_plan(server, tmp_path: Path):
    tree = server.spawn()
    assert isinstance(tree.process, ClonedLauncher)
    clone = psutil.Process(tree.pid)
    assert clone.ppid() == os.getpid()
    assert os.getsid(tree.pid) == tree.pid  # a session of its own, as a started launcher
    out = tmp_path / "out"
    plan = ProcessPlan(env={"PATH": os.defpath, "WHO": "clone"})
    tree.launch(["sh", "-c", 'echo "$WHO" > "$0"; exit 3', str(out)], plan)
    assert asyncio.run(tree.wait()) == 3
    assert out.read_text() == "clone\n"
    assert tree.returncode == 3
    assert not psutil.pid_exists(tree.pid)  # reaped by this process


def test_each_clone_is_a_new_process_and_failures_are_reported_as_a_launcher_reports_them(server):
    first, second = server.spawn(), server.spawn()
    assert first.pid != second.pid
    first.launch(["true"], PLAN)
    with pytest.raises(CommandNotRunnable) as raised:
        second.launch(["no-such-command-anywhere"], PLAN)
    assert raised.value.status == launcher.EXIT_NOT_FOUND
    assert asyncio.run(first.wait()) == 0
    assert asyncio.run(second.wait()) == launcher.EXIT_NOT_FOUND


def test_a_clone_given_no_plan_exits_without_running_anything(server):
    tree = server.spawn()
    tree.abort()
    assert asyncio.run(tree.wait()) == launcher.EXIT_ABORTED


def test_a_killed_clone_is_reaped_with_its_signal(server):
    tree = server.spawn()
    tree.process.kill()
    assert tree.process.wait() == -signal.SIGKILL
    tree.process.kill()  # reaped: its pid is nobody's to signal any more
    assert tree.process.poll() == -signal.SIGKILL


def test_a_dead_server_answers_with_an_error_and_close_reaps_it(server):
    server.process.kill()
    server.process.wait()
    with pytest.raises(OSError, match=r"fork server|Broken pipe|Connection reset"):
        server.spawn()
    server.close()  # reaped already: nothing left, no error


def test_close_ends_the_server():
    made = ForkServer.start(contain=True)
    assert made is not None
    pid = made.process.pid
    made.close()
    assert not psutil.pid_exists(pid)


def test_a_request_without_two_descriptors_is_refused_and_the_server_goes_on():
    ours, theirs = socket.socketpair()
    with ours:
        process = subprocess.Popen(
            [sys.executable, "-I", "-S", launcher_code(), "serve", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
        )
        theirs.close()
        ours.sendall(b"L")  # no descriptors
        assert ours.recv(32) == b"-22\n"
        read, write = os.pipe()
        socket.send_fds(ours, [b"L"], [read])  # one
        os.close(read)
        os.close(write)
        assert ours.recv(32) == b"-22\n"
    assert process.wait(timeout=60) == 0  # end of file: it ends


def _run(runtime: ProcessRuntime, argv: list[str]) -> str:
    """Run ``argv`` as a workload of ``runtime``; its leader's pid."""
    return asyncio.run(run_to_end(runtime, argv)).details["leader_pid"]


@pytest.mark.skipif(os.geteuid() != 0, reason="the process runtime's cgroups need root")
def test_a_runtime_clones_its_spares_and_a_server_that_died_is_not_waited_for(tmp_path):
    runtime = ProcessRuntime()
    try:
        _run(runtime, ["true"])
        _run(runtime, ["true"])  # the first spare is kept
        spare = runtime.spare_launcher
        assert spare is not None
        assert "serve" in psutil.Process(spare).cmdline()  # a clone of the server
        assert _run(runtime, ["true"]) == str(spare)
        kept = runtime.spare_launcher
        (server,) = [
            p for p in psutil.Process().children() if "serve" in p.cmdline() and p.pid != kept
        ]
        server.kill()
        out = tmp_path / "out"
        leaders = [_run(runtime, ["sh", "-c", 'echo ran >> "$0"', str(out)]) for _ in range(3)]
        assert leaders[0] == str(kept)  # cloned before the server died
        assert "serve" not in psutil.Process(runtime.spare_launcher or 0).cmdline()  # started
        assert out.read_text() == "ran\n" * 3
    finally:
        asyncio.run(runtime.close())
    assert not [p for p in psutil.Process().children() if "serve" in p.cmdline()]


@pytest.mark.skipif(os.geteuid() != 0, reason="the process runtime's cgroups need root")
def test_a_server_started_before_a_change_is_replaced_by_one_that_has_it(tmp_path):
    runtime = ProcessRuntime()
    before = os.getcwd()
    try:
        _run(runtime, ["true"])
        _run(runtime, ["true"])  # a spare, from a server started here
        os.chdir(tmp_path)
        _run(runtime, ["true"])  # the stale spare is ended; the next comes from a new server
        spare = runtime.spare_launcher
        assert _run(runtime, ["sh", "-c", 'pwd > "$0"', "out"]) == str(spare)
    finally:
        os.chdir(before)
        asyncio.run(runtime.close())
    assert (tmp_path / "out").read_text() == f"{tmp_path}\n"
