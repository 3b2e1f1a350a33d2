"""`accelkit run --pids`, the config's pids, a fork bomb inside the limit, and run's statuses."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from accelkit.cgroup import CgroupFS
from accelkit.testing.cli_runner import ACCELKIT, cli_env, run_accelkit
from accelkit.workload import Ledger

#: prints the pids.max of the group it runs in (v1 pids hierarchy, or the v2 leaf)
PIDS_MAX = """
for line in open("/proc/self/cgroup"):
    number, controllers, path = line.strip().split(":", 2)
    if controllers == "pids":
        print(open(f"/sys/fs/cgroup/pids{path}/pids.max").read().strip())
    elif number == "0" and not controllers:
        try:
            print(open(f"/sys/fs/cgroup{path}/pids.max").read().strip())
        except OSError:
            pass
"""


def _problem() -> str | None:
    if os.geteuid() != 0:
        return "pids limits are set in cgroups this user may not make"
    own = CgroupFS.read().process_directory("pids")
    if own is None:
        return "no cgroup hierarchy with the pids controller here"
    if own.version == 2 and "pids" not in (own.read("cgroup.controllers") or "").split():
        return f"the pids controller is not delegated to {own.path}"
    return None


with_pids = pytest.mark.skipif(_problem() is not None, reason=str(_problem()))


@pytest.fixture
def node(mock_node) -> Path:
    return mock_node(cpus=2, mem="4G", gpus=1)


def run(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_accelkit("run", *args, config=config)


def records(config: Path) -> list[str]:
    return sorted(f"{a}+{w}" for a, w in Ledger(config.parent / "state").read_all())


@with_pids
def test_pids_sets_pids_max_and_verbose_shows_it(node):
    result = run(node, "--slots", "cpu=1", "--pids", "37", "--", sys.executable, "-c", PIDS_MAX)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["37"]
    argv = ["--slots", "cpu=1", "--pids", "37", "--", "true"]
    shown = subprocess.run(
        [*ACCELKIT, "-v", "run", "--config", str(node), *argv],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=120,
        check=False,
    )
    assert "(pids.max 37)" in shown.stderr


@with_pids
def test_the_agents_pids_then_the_nodes_and_the_flag_over_both(node):
    text = node.read_text().replace("[resource]\n", "[resource]\npids = 300\n")
    text += '[[agents]]\nagent = { id = "small" }\nresource = { pids = 64 }\n'
    text += '[[agents]]\nagent = { id = "plain" }\n'
    node.write_text(text)
    seen = {}
    for agent, extra in [("small", []), ("plain", []), ("small", ["--pids", "9"])]:
        args = ["--agent", agent, "--slots", "cpu=1", *extra]
        result = run(node, *args, "--", sys.executable, "-c", PIDS_MAX)
        assert result.returncode == 0, result.stderr
        seen[(agent, bool(extra))] = result.stdout.split()
    assert seen == {("small", False): ["64"], ("plain", False): ["300"], ("small", True): ["9"]}


@pytest.mark.parametrize("value", ["0", "-1", "1.5", "many", "", "\uff14\uff12", "4194305"])
def test_a_pids_that_is_no_count_of_processes_is_refused_naming_the_flag(node, value):
    result = run(node, "--slots", "cpu=1", f"--pids={value}", "--", "true")
    assert result.returncode == 125
    assert result.stderr.startswith("error: Invalid value for --pids:")
    assert "Traceback" not in result.stderr
    assert records(node) == []


FORK_BOMB = """
import os, sys, time
print("started", flush=True)
while True:
    try:
        os.fork()
    except OSError:
        if sys.argv[1:] == ["report"]:
            print("limit reached", flush=True)
            sys.argv = []
        time.sleep(0.01)
"""


@with_pids
def test_a_fork_bomb_inside_its_pids_leaves_the_node_usable(node):
    """Every process of the bomb forks until the limit; another run still starts and ends."""
    probe = run(node, "--slots", "cpu=1", "--pids", "200", "--", sys.executable, "-c", PIDS_MAX)
    if probe.stdout.split() != ["200"]:  # never a bomb without its limit
        pytest.skip(f"pids.max cannot be set here: {probe.stderr.strip()}")
    argv = ["--slots", "cpu=1", "--pids", "200", "--grace", "0", "--"]
    bomb = subprocess.Popen(
        [*ACCELKIT, "run", "--config", str(node), *argv, sys.executable, "-c", FORK_BOMB, "report"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
    )
    try:
        assert bomb.stdout is not None
        for line in bomb.stdout:  # an event: some process of the bomb met the limit
            if "limit reached" in line:
                break
        else:
            pytest.fail(f"the bomb ended: {bomb.communicate()}")
        second = run(node, "--slots", "cuda.device=1", "--", sys.executable, "-c", "print(6*7)")
        assert second.returncode == 0, second.stderr
        assert second.stdout.split() == ["42"]
        bomb.send_signal(signal.SIGTERM)
        _out, err = bomb.communicate(timeout=120)
        assert bomb.returncode in (128 + signal.SIGTERM, 128 + signal.SIGKILL, 0), err
    finally:
        if bomb.poll() is None:
            bomb.kill()
            bomb.wait()
    assert records(node) == []


def test_a_file_that_cannot_be_run_exits_126(node, tmp_path):
    data = tmp_path / "notes.txt"
    data.write_text("not a program\n")
    result = run(node, "--slots", "cpu=1", "--", str(data))
    assert result.returncode == 126
    assert f"cannot run '{data}': [Errno 13] Permission denied" in result.stderr
    assert records(node) == []


def test_a_command_not_on_path_exits_127(node):
    result = run(node, "--slots", "cpu=1", "--", "no-such-command-anywhere")
    assert result.returncode == 127
    assert "cannot run 'no-such-command-anywhere'" in result.stderr
    assert records(node) == []


@pytest.mark.parametrize("status", [0, 1, 2, 125, 126, 127])
def test_the_workloads_own_status_passes_through(node, status):
    result = run(node, "--slots", "cpu=1", "--", "sh", "-c", f"exit {status}")
    assert result.returncode == status, result.stderr


def test_other_commands_keep_2_for_errors(node):
    result = subprocess.run(
        [*ACCELKIT, "status", "--config", str(node), "--no-such-option"],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=120,
        check=False,
    )
    assert result.returncode == 2
