"""A held device is granted to nobody else, whatever partition a later command opens the node with.

Real ``accelkit`` processes over one ledger: a workload holds devices under one config (its
agent, its split) while another command runs under another config (another mode, an agent
added, an agent the first config does not have). The held devices stay held: runs that would
need them are refused (125) naming the device, the holder and both agents; ``check`` and
``plan`` warn and exit 0; the node says when the ledger was opened with another config.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from accelkit.testing.cli_runner import ACCELKIT, cli_env, run_accelkit
from accelkit.workload import Ledger

DEVICES = """\
[[kinds]]
key = "cpu"
[[kinds.devices]]
id = "0"
[[kinds.devices]]
id = "1"
[[kinds]]
key = "cuda"
""" + "".join(f'[[kinds.devices]]\nid = "cuda{i}"\n' for i in range(4))


def write_config(root: Path, name: str, mode: str, agents: list[str], reserved: int = 0) -> Path:
    (root / "devices.toml").write_text(DEVICES)
    text = (
        f'[resource]\nallocation-mode = "{mode}"\nreserved-cpu = {reserved}\nreserved-mem = "0"\n'
        f'state-dir = "{root / "state"}"\n'
        '[plugins]\nallowed = ["mock"]\n[plugins.config.mock]\nconfig-file = "devices.toml"\n'
    )
    text += "".join(f'[[agents]]\nagent = {{ id = "{a}" }}\n' for a in agents)
    path = root / name
    path.write_text(text)
    return path


def accelkit(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return run_accelkit(*args, env=extra)


def run_on(config: Path, agent: str, slots: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """``accelkit run ARGV`` under ``config`` on ``agent``, asking for ``slots``."""
    return accelkit("run", "--config", str(config), "--agent", agent, "--slots", slots, "--", *argv)


@pytest.fixture
def holding(tmp_path: Path) -> Iterator[callable]:
    """Start ``accelkit run`` holding devices until the test ends; what it was granted."""
    started: list[tuple[subprocess.Popen[str], Path]] = []

    def start(config: Path, agent: str, slots: str, variable: str) -> str:
        marks = tmp_path / f"w{len(started)}"
        marks.mkdir()
        script = (
            f'printf %s "${variable}" > {marks}/got.tmp && mv {marks}/got.tmp {marks}/got; '
            f"while [ ! -e {marks}/stop ]; do sleep 0.05; done"
        )
        command = ["run", "--config", str(config), "--agent", agent, "--slots", slots]
        process = subprocess.Popen(
            [*ACCELKIT, *command, "--", "sh", "-c", script],
            env=cli_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append((process, marks))
        deadline = time.monotonic() + 120  # a guard against hanging, not a timing assertion
        while not (marks / "got").exists():
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the holding run ended early: {process.communicate()[1]}")
            time.sleep(0.02)
        return (marks / "got").read_text()

    yield start
    for process, marks in started:
        (marks / "stop").touch()
        process.communicate(timeout=120)
        assert process.returncode == 0


def test_a_run_under_another_config_never_gets_the_held_core(tmp_path, holding):
    """Issue reproduction: a2's workload holds core 1; a run under the defaults (SHARED,
    agent-1, core 0 reserved) over the same ledger got core 1 as well."""
    split = write_config(tmp_path, "real2.toml", "auto-split", ["a1", "a2"])
    shared = write_config(tmp_path, "host.toml", "shared", [], reserved=1)
    assert holding(split, "a2", "cpu=1", "MOCK_CPU_DEVICES") == "1"
    for how in (["--config", str(shared), "--agent", "agent-1"], []):  # [] finds it in the env
        result = accelkit(
            "run", *how, "--slots", "cpu=1", "--", "printenv", "MOCK_CPU_DEVICES",
            ACCELKIT_CONFIG=str(shared),
        )  # fmt: skip
        assert result.returncode == 125, result.stderr
        assert result.stdout == ""
        assert re.search(
            r"warning: ledger: device cpu 1 is held by workload '[^']+' of agent 'a2', booked "
            r"under another partition; this config gives it to agent 'agent-1'",
            result.stderr,
        ), result.stderr
        assert "of agent 'a2' (1=1), booked under another partition" in result.stderr
        assert "agent 'agent-1''s now" in result.stderr


def test_an_agent_added_in_auto_split_does_not_get_a_held_gpu(tmp_path, holding):
    """Issue reproduction: agent-2 holds cuda2 and cuda3; the config gains agent-3, whose share
    of the split is cuda3; its run got cuda3."""
    two = write_config(tmp_path, "two.toml", "auto-split", ["agent-1", "agent-2"])
    three = write_config(tmp_path, "three.toml", "auto-split", ["agent-1", "agent-2", "agent-3"])
    assert holding(two, "agent-2", "cuda.device=2", "MOCK_CUDA_DEVICES") == "cuda2,cuda3"
    held = "device cuda cuda3 is held by workload '[^']+' of agent 'agent-2'"
    moved = "this config gives it to agent 'agent-3': it stays held, granted to nobody"
    for command in ("check", "plan"):
        result = accelkit(command, "--config", str(three))
        assert result.returncode == 0, result.stderr
        said = result.stdout + result.stderr
        assert len(re.findall(f"{held}.*{moved}", said)) == 1, said
    refused = run_on(three, "agent-3", "cuda.device=1", "true")
    assert refused.returncode == 125, refused.stderr
    assert re.search(f"warning: ledger: {held}.*{moved}", refused.stderr), refused.stderr
    assert "of agent 'agent-2' (cuda3=1), booked under another partition" in refused.stderr
    assert "agent 'agent-3''s now" in refused.stderr
    assert f"last opened with another config ({two}" in refused.stderr
    assert f"than this command reads ({three}" in refused.stderr
    assert "unknown device" not in refused.stderr
    assert len(Ledger(tmp_path / "state").read_all()) == 1  # nothing booked by the refusal
    free = run_on(three, "agent-1", "cuda.device=2", "printenv", "MOCK_CUDA_DEVICES")
    assert free.returncode == 0, free.stderr
    assert free.stdout.strip() == "cuda0,cuda1"


def test_the_same_config_says_nothing_of_other_partitions(tmp_path, holding):
    two = write_config(tmp_path, "two.toml", "auto-split", ["agent-1", "agent-2"])
    holding(two, "agent-2", "cuda.device=1", "MOCK_CUDA_DEVICES")
    for command in ("check", "plan"):
        result = accelkit(command, "--config", str(two))
        assert result.returncode == 0, result.stderr
        assert "another partition" not in result.stdout + result.stderr
        assert "another config" not in result.stdout + result.stderr
    run = run_on(two, "agent-2", "cuda.device=1", "true")
    assert run.returncode == 0, run.stderr
    assert "warning" not in run.stderr


def test_repartition_moves_no_held_device(tmp_path, holding):
    """repartition under a config whose split would move a held device refuses it: nothing
    changes, and the held device stays where the running workload's booking put it."""
    two = write_config(tmp_path, "two.toml", "auto-split", ["agent-1", "agent-2"])
    three = write_config(tmp_path, "three.toml", "auto-split", ["agent-1", "agent-2", "agent-3"])
    holding(two, "agent-2", "cuda.device=2", "MOCK_CUDA_DEVICES")
    result = accelkit("repartition", "--config", str(three), "--json")
    assert result.returncode == 0, result.stderr
    moved = json.loads(result.stdout)
    assert (moved["given"], moved["moved"]) == ({}, {})
    assert moved["agents"]["agent-3"]["cuda"] == ["cuda3"]  # held: it stays where it is
    refused = run_on(three, "agent-3", "cuda.device=1", "true")
    assert refused.returncode == 125, refused.stderr
