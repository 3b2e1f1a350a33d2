"""`accelkit run` at a real pseudo-terminal: job control, Ctrl-C, and the terminal given back.

accelkit runs with a pseudo-terminal as its controlling terminal and stdin/stdout/stderr, as in
an interactive shell; the test types into the terminal's master side and waits for what the
workload prints (markers), never for time.
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import signal
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from accelkit.testing.cli_runner import ACCELKIT, cli_env
from accelkit.workload import Ledger
from accelkit.workload.terminal import Terminal as WorkloadTerminal

#: how long a marker may take before the test fails (a bound on failure, not a speed assumption)
PATIENCE = 60.0

#: a REPL-like workload: reports its terminal, catches SIGINT (and SIGTERM with ``ignore-term``)
REPL = """
import os, signal, sys
signal.signal(signal.SIGINT, lambda *_: print("CAUGHT-INT", flush=True))
if "ignore-term" in sys.argv:
    signal.signal(signal.SIGTERM, lambda *_: print("CAUGHT-TERM", flush=True))
own_session = os.getsid(0) == os.getpid()
foreground = os.tcgetpgrp(0) == os.getpgrp()
print("TTY", os.isatty(0), own_session, foreground, "READY", flush=True)
for line in sys.stdin:
    print("GOT", line.strip().upper(), flush=True)
"""


def _readable(fd: int, timeout: float) -> bool:
    """Whether ``fd`` has something to read within ``timeout`` seconds (``poll``: a long test
    session's descriptor numbers may pass ``select``'s limit of 1024)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(timeout * 1000))


class Terminal:
    """accelkit started on a pseudo-terminal; :meth:`expect` reads until a marker appears."""

    def __init__(self, config: Path, *argv: str, grace: str = "60") -> None:
        self.master, slave = os.openpty()
        self.before = termios.tcgetattr(self.master)
        env = cli_env()
        env["PS1"] = "PROMPT> "
        command = [*ACCELKIT, "run", "--config", str(config), "--slots", "cpu=1"]
        self.process = subprocess.Popen(
            [*command, "--grace", grace, "--", *argv],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            start_new_session=True,
            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),  # noqa: PLW1509
        )
        os.close(slave)
        self.seen = b""

    def expect(self, marker: str, times: int = 1) -> None:
        deadline = time.monotonic() + PATIENCE
        while self.seen.count(marker.encode()) < times:
            left = deadline - time.monotonic()
            ready = _readable(self.master, max(left, 0))
            if not ready:
                pytest.fail(f"no {marker!r} within {PATIENCE:g} s; seen: {self.seen[-800:]!r}")
            try:
                chunk = os.read(self.master, 4096)
            except OSError:
                chunk = b""
            if not chunk:
                pytest.fail(f"the terminal closed before {marker!r}; seen: {self.seen[-800:]!r}")
            self.seen += chunk

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def wait(self) -> int:
        status = self.process.wait(PATIENCE)
        with_more = True
        while with_more:  # what is left to read
            with_more = _readable(self.master, 0)
            if with_more:
                try:
                    chunk = os.read(self.master, 4096)
                except OSError:
                    chunk = b""
                self.seen += chunk
                with_more = bool(chunk)
        return status

    @property
    def text(self) -> str:
        return self.seen.decode(errors="replace")

    def close(self) -> None:
        if self.process.poll() is None:  # a failed test: end the run as a user would
            self.process.terminate()
            try:
                self.process.wait(PATIENCE)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        os.close(self.master)


@pytest.fixture
def node(mock_node) -> Path:
    return mock_node(cpus=2, mem="4G")


@pytest.fixture
def at_terminal(node) -> Iterator[type[Terminal]]:
    started: list[Terminal] = []

    class Started(Terminal):
        def __init__(self, *argv: str, grace: str = "60") -> None:
            super().__init__(node, *argv, grace=grace)
            started.append(self)

    yield Started
    for terminal in started:
        terminal.close()
    assert Ledger(node.parent / "state").read_all() == {}


def test_bash_gets_job_control_and_its_exit_status_is_the_runs(at_terminal):
    term = at_terminal("bash", "--norc", "--noprofile", "-i")
    term.expect("PROMPT> ")
    term.type("sleep 300 &\n")
    term.type("set -o | grep monitor; jobs; echo A$((40+2))B\n")
    term.expect("A42B")
    assert re.search(r"monitor\s+on", term.text)
    assert "Running" in term.text
    term.type("kill %1; exit 7\n")
    assert term.wait() == 7
    assert "no job control" not in term.text


def test_the_first_ctrl_c_only_reaches_the_workload_and_a_second_ends_it(at_terminal):
    term = at_terminal(sys.executable, "-c", REPL)
    term.expect("READY")
    assert "TTY True True True" in term.text  # its own session, the terminal its own
    term.type("\x03")
    term.expect("CAUGHT-INT")
    term.type("alive\n")
    term.expect("GOT ALIVE")  # still running, --grace or not
    term.type("\x03")
    term.expect("second interrupt within 60 s: SIGTERM to every process of the workload")
    assert term.wait() == 128 + signal.SIGTERM


def test_a_third_ctrl_c_kills_a_workload_that_ignores_sigterm(at_terminal):
    term = at_terminal(sys.executable, "-c", REPL, "ignore-term")
    term.expect("READY")
    term.type("\x03")
    term.expect("CAUGHT-INT")
    term.type("\x03")
    term.expect("CAUGHT-TERM")
    term.type("\x03")
    term.expect("third interrupt: SIGKILL to every process of the workload")
    assert term.wait() == 128 + signal.SIGKILL


def test_interrupts_further_apart_than_the_grace_are_each_a_first(at_terminal):
    term = at_terminal(sys.executable, "-c", REPL, grace="0")
    term.expect("READY")
    for round_ in range(3):
        term.type("\x03")
        term.expect("CAUGHT-INT", times=round_ + 1)
        term.type(f"round{round_}\n")
        term.expect(f"GOT ROUND{round_}")
    term.type("\x04")  # end of input: the REPL ends
    assert term.wait() == 0
    assert "interrupt within" not in term.text


def test_a_sigint_sent_to_accelkit_counts_as_a_typed_ctrl_c(at_terminal):
    term = at_terminal(sys.executable, "-c", REPL)
    term.expect("READY")
    os.kill(term.process.pid, signal.SIGINT)
    term.expect("CAUGHT-INT")  # passed to the terminal's foreground job
    term.type("alive\n")
    term.expect("GOT ALIVE")
    os.kill(term.process.pid, signal.SIGINT)
    term.expect("second interrupt")
    assert term.wait() == 128 + signal.SIGTERM


def test_the_terminal_is_given_back_as_it_was(at_terminal):
    term = at_terminal(sys.executable, "-c", REPL)
    term.expect("READY")
    during = termios.tcgetattr(term.master)
    term.type("\x04")
    assert term.wait() == 0
    after = termios.tcgetattr(term.master)
    assert not during[3] & termios.ICANON  # raw while the workload ran
    assert after == term.before


def test_no_terminal_is_made_for_a_pipe_or_a_terminal_in_whose_background_accelkit_runs():
    read, write = os.pipe()
    master, slave = os.openpty()
    try:
        assert WorkloadTerminal.open(read) is None
        # not this process's controlling terminal: it has no foreground job of this process
        assert WorkloadTerminal.open(slave) is None
    finally:
        for fd in (read, write, master, slave):
            os.close(fd)


_PLAIN = ("--slots", "cpu=1", "--grace", "0.5", "--")


def test_without_a_terminal_on_stdin_the_first_sigint_is_forwarded_and_grace_applies(node):
    """Today's rule where stdin is a pipe: SIGINT reaches every process, SIGKILL after grace."""
    ready = "import signal, sys, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
    ready += "print('READY', flush=True)\ntime.sleep(600)\n"
    process = subprocess.Popen(
        [*ACCELKIT, "run", "--config", str(node), *_PLAIN, sys.executable, "-c", ready],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
    )
    assert process.stdout is not None
    assert process.stdout.readline() == "READY\n"
    process.send_signal(signal.SIGINT)
    _out, err = process.communicate(timeout=PATIENCE)
    assert process.returncode == 128 + signal.SIGKILL
    assert "did not end within --grace 0.5 s of SIGINT: SIGKILL to every process of it" in err
