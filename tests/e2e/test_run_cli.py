"""`accelkit run` as a real process: environment, exit status, refusals, signals, the tree."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from accelkit.cgroup import CgroupFS
from accelkit.testing.cli_runner import ACCELKIT, cli_env, run_accelkit
from accelkit.workload import Ledger

from ..memory_limit_probes import RESERVE, THREADS


@pytest.fixture
def node(mock_node) -> Path:
    return mock_node(cpus=2, mem="4G", gpus=1)


def accelkit(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_accelkit(*args, config=config)


def py(code: str) -> tuple[str, ...]:
    """``code`` run by this interpreter."""
    return (sys.executable, "-c", code)


def records(config: Path) -> list[str]:
    return sorted(f"{a}+{w}" for a, w in Ledger(config.parent / "state").read_all())


def run_argv(config: Path, slots: str, *command: str, options: tuple[str, ...] = ()) -> list[str]:
    """The command line of ``accelkit run`` of ``command`` on agent-1, asking for ``slots``."""
    head = ["run", "--config", str(config), "--agent", "agent-1", "--slots", slots]
    return [*ACCELKIT, *head, *options, "--", *command]


def refused(config: Path, *options: str) -> str:
    """``accelkit run OPTIONS -- true`` on agent-1 refused by accelkit itself (125), with an
    error, no traceback and nothing booked: what it said on stderr."""
    result = accelkit(config, "run", "--agent", "agent-1", *options, "--", "true")
    assert result.returncode == 125, result.stderr
    assert result.stderr.startswith("error:"), result.stderr
    assert "Traceback" not in result.stderr
    assert "internal error" not in result.stderr
    assert records(config) == []
    return result.stderr


def test_runs_the_command_with_the_hooks_env_and_its_exit_status(node):
    script = (
        "import os, sys; "
        "print(os.environ['MOCK_CUDA_DEVICES'], os.environ['MOCK_CPU_DEVICES']); sys.exit(3)"
    )
    slots = ["--slots", "cuda.device=1,cpu=2,mem=1G"]
    result = accelkit(node, "run", "--agent", "agent-1", *slots, "--", sys.executable, "-c", script)
    assert result.returncode == 3, result.stderr
    assert result.stdout.split() == ["cuda0", "0,1"]
    assert records(node) == []


def test_a_refused_allocation_exits_125_naming_the_slot_and_amounts(node):
    said = refused(node, "--slots", "cuda.device=2")
    assert said.startswith("error: cannot allocate on agent 'agent-1'")
    assert "'cuda.device'" in said
    assert "requested 2" in said
    assert "only 1 allocatable" in said


@pytest.mark.parametrize(
    ("slots", "message"),
    [
        ("cuda.device", "expected SLOT=AMOUNT"),
        ("cpu=1,cpu=1", "given twice"),
        ("cpu=lots", "not an amount"),
        ("cpu=-1", "non-negative"),
        ("cpu=NaN", "not an amount"),
        (",", "no slot requested"),
    ],
)
def test_malformed_slots_are_usage_errors(node, slots, message):
    assert message in refused(node, "--slots", slots)


@pytest.mark.parametrize(
    "amount",
    [
        "1e40",
        "1e999999",
        "1e-50",
        "0.0000000000000000000000000000001",
        # past what a device or the ledger holds (25 digits before the point, 24 after): a
        # booking of it could not have been read back
        "1e26",
        "0.0000000000000000000000001",
    ],
)
def test_absurd_amounts_are_usage_errors(node, amount):
    assert f"'{amount}' is out of range" in refused(node, "--slots", f"cpu={amount}")


def test_a_request_at_the_top_of_the_range_is_refused_with_its_amount_in_full(node):
    amount = "9" * 25  # the largest whole amount there is
    said = refused(node, "--slots", f"cpu={amount}")
    assert said.startswith("error: cannot allocate on agent 'agent-1'")
    assert f"requested {amount}," in said


@pytest.mark.parametrize(
    ("grace", "said"),
    [
        ("nan", "expected a number of seconds"),
        ("inf", "expected a number of seconds"),
        ("1e3", "expected a number of seconds"),
        ("-1", "expected a number of seconds"),
        ("\uff12", "expected a number of seconds"),  # a full-width digit
        ("86401", "at most 86400"),
    ],
)
def test_a_grace_that_is_no_duration_is_a_usage_error(node, grace, said):
    stderr = refused(node, "--grace", grace, "--slots", "cpu=1")
    assert "--grace" in stderr
    assert said in stderr


def test_a_grace_of_zero_kills_at_once_and_is_accepted(node):
    result = accelkit(
        node, "run", "--agent", "agent-1", "--grace", "0", "--slots", "cpu=1", "--", "true"
    )
    assert result.returncode == 0, result.stderr


def test_unknown_agent_and_unknown_slot_exit_125(node):
    result = accelkit(node, "run", "--agent", "agent-9", "--slots", "cpu=1", "--", "true")
    assert result.returncode == 125
    assert "unknown agent 'agent-9'" in result.stderr
    result = accelkit(node, "run", "--agent", "agent-1", "--slots", "rocm.device=1", "--", "true")
    assert result.returncode == 125
    assert "rocm.device" in result.stderr
    assert records(node) == []


def test_a_command_that_cannot_start_exits_127_and_frees_everything(node):
    result = accelkit(
        node, "run", "--agent", "agent-1", "--slots", "cuda.device=1", "--", "/nonexistent/command"
    )
    assert result.returncode == 127
    assert "cannot run '/nonexistent/command'" in result.stderr
    assert records(node) == []


def test_death_by_signal_is_128_plus_the_signal(node):
    suicide = "import os; os.kill(os.getpid(), 9)"
    result = accelkit(node, "run", "--agent", "agent-1", "--slots", "cpu=1", "--", *py(suicide))
    assert result.returncode == 128 + 9


def _wait_for(path: Path, process: subprocess.Popen[str]) -> None:
    while not path.exists():
        assert process.poll() is None, process.communicate()
        time.sleep(0.02)


TRAP = """
import signal, sys, time, pathlib
out = pathlib.Path(sys.argv[1])
def stop(signum, frame):
    out.with_suffix(".got").write_text(str(signum))
    sys.exit(7)
for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
    signal.signal(signum, stop)
out.write_text("ready")
while True:
    time.sleep(1)
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT])
def test_signals_are_forwarded_to_the_workload(node, tmp_path, signum):
    ready = tmp_path / "ready.txt"
    process = subprocess.Popen(
        run_argv(node, "cpu=1", *py(TRAP), str(ready)),
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_for(ready, process)
    process.send_signal(signum)
    _out, err = process.communicate(timeout=60)
    assert process.returncode == 7, err
    assert ready.with_suffix(".got").read_text() == str(int(signum))
    assert records(node) == []


def test_a_child_outliving_its_leader_keeps_the_run_until_it_ends(node, tmp_path):
    """Liveness is the cgroup's: the run returns the leader's status once the child is gone."""
    done = tmp_path / "done"
    script = f"(sleep 1; touch {done}) & exit 3"
    started = time.monotonic()
    result = accelkit(
        node, "run", "--agent", "agent-1", "--slots", "cpu=1", "--", "sh", "-c", script
    )
    assert result.returncode == 3, result.stderr
    assert done.exists()  # the child ran to its end before the run returned
    assert time.monotonic() - started >= 1
    assert records(node) == []


def test_run_is_listed_in_help():
    result = subprocess.run(
        [*ACCELKIT, "run", "--help"],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=60,
        check=False,
    )
    assert result.returncode == 0
    assert "--slots" in result.stdout


STUBBORN = """
import os, signal, sys, time, pathlib
out = pathlib.Path(sys.argv[1])
def term(signum, frame):
    (out / "term").write_text("1")  # stays: only SIGKILL ends it
signal.signal(signal.SIGTERM, term)
signal.signal(signal.SIGINT, term)
if len(sys.argv) > 2:
    os.setsid()  # a daemon: its own session, parent gone
(out / "pid.tmp").write_text(str(os.getpid()))
os.replace(out / "pid.tmp", out / "pid")  # whole, or not there
while True:
    time.sleep(1)
"""

LEADER = """
import pathlib, subprocess, sys, time
out = pathlib.Path(sys.argv[1])
subprocess.Popen([sys.executable, "-c", sys.argv[2], str(out), *sys.argv[3:]])
while not (out / "pid").exists():
    time.sleep(0.02)
"""


def _start_stubborn(node: Path, out: Path, grace: str, *extra: str) -> subprocess.Popen[str]:
    leader = (*py(LEADER), str(out), STUBBORN, *extra)
    return subprocess.Popen(
        run_argv(node, "cuda.device=1,cpu=1", *leader, options=("--grace", grace)),
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


#: what run says, once, when the leader exits and other processes of the workload run on
LEFT = "left 1 process(es) running"


def _said(process: subprocess.Popen[str], text: str) -> list[str]:
    """The lines of ``process``'s stderr up to the first that holds ``text`` (an event)."""
    assert process.stderr is not None
    lines = []
    for line in process.stderr:
        lines.append(line)
        if text in line:
            return lines
    pytest.fail(f"stderr ended without {text!r}: {''.join(lines)}")


def _stubborn_gone(out: Path) -> bool:
    pid = int((out / "pid").read_text())
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize("daemon", [False, True], ids=["child", "setsid-daemon"])
def test_a_process_ignoring_sigterm_is_killed_after_the_grace(node, tmp_path, daemon):
    """The leader has exited; its child (or a setsid daemon) ignores SIGTERM: --grace 1 ends it."""
    out = tmp_path / "stubborn"
    out.mkdir()
    process = _start_stubborn(node, out, "1", *(["daemon"] if daemon else []))
    try:
        _wait_for(out / "pid", process)
        before = _said(process, LEFT)  # the leader exited; the run goes on for the child
        assert "the command exited with status 0 and left 1 process(es) running" in before[-1]
        assert process.poll() is None
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        _out, err = process.communicate(timeout=60)
        assert (out / "term").exists()  # forwarded to every process of the workload
        assert 1 <= time.monotonic() - started < 30
        assert process.returncode == 0, err  # the leader's own status
        assert "did not end within --grace 1 s of SIGTERM: SIGKILL to every process" in err
        assert LEFT not in err  # said once
        assert _stubborn_gone(out)
        assert records(node) == []
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_second_sigint_kills_at_once_and_the_teardown_completes(node, tmp_path):
    out = tmp_path / "stubborn"
    out.mkdir()
    process = _start_stubborn(node, out, "600")
    try:
        _wait_for(out / "pid", process)
        _said(process, LEFT)  # the leader exited; the run goes on for the child
        process.send_signal(signal.SIGTERM)
        _wait_for(out / "term", process)
        process.send_signal(signal.SIGINT)
        _out, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
        assert "second SIGINT: SIGKILL to every process of the workload" in err
        assert _stubborn_gone(out)
        assert records(node) == []
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


CPU_ONLY = ("--slots", "cpu=1", "--")


def test_verbose_shows_the_cgroups_and_stderr_names_the_workload_and_its_devices(node):
    result = accelkit(
        node, "run", "--agent", "agent-1", "--slots", "cuda.device=1,cpu=1", "--", "true"
    )
    assert result.returncode == 0, result.stderr
    assert "accelkit: workload pid:" in result.stderr
    assert "devices cpu:0, cuda:cuda0" in result.stderr
    verbose = subprocess.run(
        [*ACCELKIT, "-v", "run", "--config", str(node), "--agent", "agent-1", *CPU_ONLY, "true"],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=120,
        check=False,
    )
    assert verbose.returncode == 0, verbose.stderr
    if os.geteuid() == 0:
        own = CgroupFS.read().process_directory("memory")
        version = 1 if own is None else own.version
        said = f"accelkit: process runtime: cgroup v{version} accelkit/agent-1/pid-"
        assert said in verbose.stderr
        assert "accelkit:   memory: /" in verbose.stderr
        if version == 1:
            assert "accelkit:   devices: /" in verbose.stderr
        else:  # DESIGN §14: said with -v (and in the docs), not as a warning of every run
            assert "not contained: devices: device isolation on cgroup v2" in verbose.stderr
            assert "device isolation" not in result.stderr


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--runtime", "docker"], "--runtime docker needs --image IMG"),
        (["--image", "busybox"], "--image is for --runtime docker"),
        (["--runtime", "podman", "--image", "x"], "'podman' is not a registered runtime"),
    ],
)
def test_runtime_options_are_checked(node, options, message):
    assert message in refused(node, "--slots", "cpu=1", *options)


@pytest.fixture
def real_node(tmp_path) -> Path:
    """The shipped cpu and mem plugins on this machine: mem=1G becomes a memory limit."""
    config = tmp_path / "real.toml"
    config.write_text(
        f'[resource]\nstate-dir = "{tmp_path / "real-state"}"\nreserved-cpu = 0\n'
        'reserved-mem = "0"\n[plugins]\nallowed = ["cpu", "mem"]\n'
    )
    return config


@pytest.mark.parametrize(("code", "said"), [(THREADS, "200 threads ok"), (RESERVE, "reserved ok")])
def test_mem_1g_limits_memory_not_address_space(real_node, code, said):
    argv = [*ACCELKIT, "-v", "run", "--config", str(real_node), "--agent", "agent-1"]
    result = subprocess.run(
        [*argv, "--slots", "cpu=1,mem=1G", "--", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=120,
        check=False,
    )
    if "cannot enforce the memory limit" in result.stderr:
        pytest.skip("no usable memory controller here")
    assert result.returncode == 0, result.stderr
    assert said in result.stdout
    if "cgroup v1" in result.stderr:
        assert "(limit 1G)" in result.stderr


def test_a_workload_ended_by_release_says_who_released_it(node):
    process = subprocess.Popen(
        [*ACCELKIT, "run", "--config", str(node), "--slots", "cpu=1", "--", "sleep", "600"],
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        (line,) = _said(process, "workload pid:")
        workload = line.split()[2]
        released = accelkit(node, "release", workload)
        assert released.returncode == 0, released.stderr
        _out, err = process.communicate(timeout=60)
        assert process.returncode == 128 + signal.SIGTERM
        assert "the workload was released by accelkit release (pid " in err
        assert "did not end within --grace" not in err  # only what happened
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert records(node) == []
    assert not list((node.parent / "state" / "released").iterdir())


def test_a_workload_ended_by_a_plain_sigterm_names_no_release(node):
    process = subprocess.Popen(
        [*ACCELKIT, "run", "--config", str(node), "--slots", "cpu=1", "--", "sleep", "600"],
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    _said(process, "workload pid:")
    process.send_signal(signal.SIGTERM)
    _out, err = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM
    assert "released" not in err
