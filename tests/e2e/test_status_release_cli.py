"""``accelkit status`` and ``accelkit release`` against real runs, real processes and the ledger."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from decimal import Decimal
from pathlib import Path

import pytest

from accelkit.config import load_host_config
from accelkit.events import WorkloadPhase
from accelkit.testing.cli_runner import ACCELKIT, cli_env, run_accelkit
from accelkit.types import AgentId, DeviceName, SlotName, Workload
from accelkit.workload import Ledger, LedgerRecord, ProcessStamp

pytestmark = pytest.mark.slow  # real `accelkit run` processes

CUDA = DeviceName("cuda")
ONE_GPU_RUN = ("--agent", "agent-1", "--slots", "cuda.device=1")


@pytest.fixture
def node(mock_node) -> Path:
    return mock_node(cpus=1, gpus=1)


def accelkit(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_accelkit(*args, config=config)


def status(config: Path) -> list[dict]:
    result = accelkit(config, "status", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def start_run(config: Path, *command: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            *ACCELKIT,
            "run",
            "--config",
            str(config),
            "--agent",
            "agent-1",
            "--slots",
            "cuda.device=1",
            "--",
            *command,
        ],
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_workload(config: Path, phase: str = "post_create") -> dict:
    deadline = time.monotonic() + 60  # a guard against hanging, not an assertion on time
    while time.monotonic() < deadline:
        found = [w for w in status(config) if w["phase"] == phase]
        if found:
            return found[0]
        time.sleep(0.1)
    pytest.fail("the workload never showed up in 'accelkit status'")


def records(config: Path) -> list[tuple[str, str]]:
    return sorted(Ledger(config.parent / "state").read_all())


def test_status_of_an_empty_node(node):
    assert status(node) == []
    table = accelkit(node, "status")
    assert table.returncode == 0
    assert table.stdout.splitlines()[1].startswith("WORKLOAD")


def test_status_shows_a_running_workload_and_a_refused_run_names_its_holder(node):
    run = start_run(node, "sleep", "300")
    try:
        shown = wait_for_workload(node)
        assert shown["agent"] == "agent-1"
        assert shown["devices"]["cuda"] == ["cuda0"]
        assert shown["liveness"] == "managed"
        assert shown["owner_alive"] is True
        assert shown["unfinished_teardown"] == []
        refused = accelkit(node, "run", "--agent", "agent-1", "--slots", "cuda.device=1", "true")
        assert refused.returncode == 125
        assert f"held by {shown['workload']!r} of agent 'agent-1' (cuda0=1)" in refused.stderr
    finally:
        run.kill()
        run.wait()


def test_release_asks_the_run_that_owns_the_workload_to_end_it(node):
    run = start_run(node, "sleep", "300")
    shown = wait_for_workload(node)
    released = accelkit(node, "release", shown["workload"], "--grace", "1")
    assert released.returncode == 0, released.stderr
    assert "stopped it first" in released.stdout
    assert run.wait(timeout=60) == 128 + signal.SIGTERM
    assert records(node) == []


def test_release_of_a_workload_whose_run_was_killed_stops_it_and_tears_it_down(node):
    run = start_run(node, "sleep", "300")
    shown = wait_for_workload(node)
    [record] = Ledger(node.parent / "state").read_all().values()
    assert record.leader is not None
    os.kill(run.pid, signal.SIGKILL)
    run.wait()
    assert record.leader.is_running()  # the workload outlived its accelkit process
    [alive] = status(node)
    assert alive["liveness"] == "running"
    assert alive["owner_alive"] is False
    released = accelkit(node, "release", shown["workload"], "--grace", "1")
    assert released.returncode == 0, released.stderr
    assert "post_terminate ran for: cuda" in released.stdout
    deadline = time.monotonic() + 30
    while record.leader.is_running() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not record.leader.is_running()
    assert records(node) == []


def test_release_of_an_unknown_workload_is_an_error(node):
    result = accelkit(node, "release", "nope")
    assert result.returncode == 2
    assert "error: no workload 'nope'" in result.stderr
    assert "Traceback" not in result.stderr


def _container(node: Path, workload_id: str) -> LedgerRecord:
    ledger = Ledger(load_host_config(node).resource.state_dir)
    rec = LedgerRecord(
        AgentId("agent-1"),
        Workload.container(workload_id),
        {CUDA: {SlotName("cuda.device"): {"cuda0": Decimal(1)}}},
        (CUDA,),
    ).with_phase(CUDA, WorkloadPhase.PRE_CREATE)
    ledger.write(rec)
    ledger.close()
    return rec


def test_a_workload_that_cannot_be_reached_needs_force_which_says_what_it_skips(node):
    _container(node, "box")
    [shown] = status(node)
    assert shown["liveness"] == "unknown"
    refused = accelkit(node, "release", "box")
    assert refused.returncode == 2
    assert "cannot reach workload 'box'" in refused.stderr
    assert "--force" in refused.stderr
    assert records(node) == [("agent-1", "box")]
    forced = accelkit(node, "release", "box", "--force")
    assert forced.returncode == 0, forced.stderr
    assert "warning: --force: skipping stopping the workload" in forced.stderr
    assert "post_terminate ran for: cuda" in forced.stdout
    assert records(node) == []


def test_an_ambiguous_workload_id_needs_the_agent(mock_node, tmp_path):
    config = mock_node(gpus=2)
    text = config.read_text().replace("[plugins]", 'allocation-mode = "auto-split"\n[plugins]')
    config.write_text(text.replace("[resource]\n", "[resource]\n"))
    ledger = Ledger(load_host_config(config).resource.state_dir)
    stamp = ProcessStamp.of(os.getpid())
    for agent in ("agent-1", "agent-2"):
        ledger.write(
            LedgerRecord(
                AgentId(agent), Workload.container("same"), {}, (), owner=stamp, leader=None
            )
        )
    ledger.close()
    result = accelkit(config, "release", "same")
    assert result.returncode == 2
    assert "several agents have a workload 'same'" in result.stderr
