"""Device health through the real command: flip a mock GPU in its TOML, cordon one, run, status.

Each step is a separate ``accelkit`` process, as an operator would run them; a workload
observer (``tests/fixtures/observer-plugin``, really installed) logs the events the node sends.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from accelkit.testing.cli_runner import ACCELKIT, cli_env, run_accelkit

from ..mock_device_edits import set_health

pytestmark = pytest.mark.slow  # real `accelkit run` processes


class Node:
    def __init__(self, config: Path, site: Path) -> None:
        self.config = config
        self.devices = config.parent / "devices.toml"
        self.log = config.parent / "events.jsonl"
        self.env = cli_env()
        self.env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(site), os.environ.get("PYTHONPATH")])
        )
        self.env["OBSERVER_LOG"] = str(self.log)

    def accelkit(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run_accelkit(*args, config=self.config, env=self.env)

    def run_gpu(self, *command: str) -> subprocess.CompletedProcess[str]:
        return self.accelkit(
            "run", "--agent", "agent-1", "--slots", "cuda.device=1", "--", *command
        )

    def gpu_of(self, result: subprocess.CompletedProcess[str]) -> str:
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()

    def status(self) -> list[dict[str, Any]]:
        result = self.accelkit("status", "--json")
        assert result.returncode == 0, result.stderr
        found: list[dict[str, Any]] = json.loads(result.stdout)
        return found

    def set_health(self, device: str, state: str, reason: str = "") -> None:
        set_health(self.devices, device, state, reason)

    def events(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]


@pytest.fixture
def node(mock_node: Callable[..., Path], observer_site: Path) -> Node:
    config = mock_node(cpus=2, gpus=2)
    config.write_text(config.read_text().replace('["mock"]', '["mock", "observer"]'))
    return Node(config, observer_site)


PRINT_GPU = ("sh", "-c", "echo $MOCK_CUDA_DEVICES")


def wait_for_workload(node: Node) -> dict[str, Any]:
    deadline = time.monotonic() + 60  # a guard against hanging, not an assertion on time
    while time.monotonic() < deadline:
        found = [w for w in node.status() if w["phase"] == "post_create"]
        if found:
            return found[0]
        time.sleep(0.1)
    pytest.fail("the workload never showed up in 'accelkit status'")


def test_an_unhealthy_gpu_is_never_granted_and_comes_back_without_restart(node: Node) -> None:
    node.set_health("cuda1", "unhealthy", "XID 79")
    assert {node.gpu_of(node.run_gpu(*PRINT_GPU)) for _ in range(3)} == {"cuda0"}
    both = node.accelkit("run", "--agent", "agent-1", "--slots", "cuda.device=2", "--", "true")
    assert both.returncode == 125
    assert "unhealthy or cordoned: cuda1" in both.stderr
    assert "Traceback" not in both.stderr
    devices = json.loads(node.accelkit("devices", "--json").stdout)
    assert devices["cuda"][1]["health"]["state"] == "unhealthy"
    assert devices["cuda"][1]["health"]["reason"] == "XID 79"
    plan = node.accelkit("plan", "--json")
    assert "device cuda/cuda1 is unhealthy (XID 79)" in "".join(json.loads(plan.stdout)["warnings"])
    node.set_health("cuda1", "healthy")
    assert (
        node.accelkit(
            "run", "--agent", "agent-1", "--slots", "cuda.device=2", "--", "true"
        ).returncode
        == 0
    )


def test_a_running_workload_on_a_gpu_that_turns_unhealthy_is_told_and_shown(node: Node) -> None:
    node.set_health("cuda1", "unhealthy", "maintenance")  # the workload gets cuda0
    run = subprocess.Popen(
        [
            *ACCELKIT,
            "run",
            "--config",
            str(node.config),
            "--agent",
            "agent-1",
            "--slots",
            "cuda.device=1",
            "--",
            "sleep",
            "300",
        ],
        env=node.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        shown = wait_for_workload(node)
        assert shown["devices"]["cuda"] == ["cuda0"]
        node.set_health("cuda1", "healthy")
        node.set_health("cuda0", "unhealthy", "XID 48")
        [row] = node.status()
        assert row["health"]["cuda"]["cuda0"]["state"] == "unhealthy"
        assert [n["text"] for n in row["notes"]] == ["device cuda/cuda0 turned unhealthy: XID 48"]
        table = node.accelkit("status")
        assert "cuda/cuda0 is unhealthy (XID 48)" in table.stdout
        told = [e for e in node.events() if e["phase"] == "device_unhealthy"]
        assert len(told) == 1
        assert told[0]["workload"] == shown["workload"]
        assert told[0]["devices"] == {"cuda": ["cuda0"]}
        node.status()  # another process sees the same change: nobody is told twice
        assert len([e for e in node.events() if e["phase"] == "device_unhealthy"]) == 1
        assert node.gpu_of(node.run_gpu(*PRINT_GPU)) == "cuda1"  # the only healthy free GPU
    finally:
        run.kill()
        run.wait()


def test_cordon_and_uncordon_through_the_command(node: Node) -> None:
    cordoned = node.accelkit("cordon", "--reason", "fan noise", "--json", "cuda", "cuda0")
    assert cordoned.returncode == 0, cordoned.stderr
    health = json.loads(cordoned.stdout)["health"]
    assert (health["state"], health["reason"]) == ("unhealthy", "cordoned: fan noise")
    again = node.accelkit("cordon", "cuda", "cuda0")
    assert "was already cordoned" in again.stdout
    assert {node.gpu_of(node.run_gpu(*PRINT_GPU)) for _ in range(2)} == {"cuda1"}
    assert "cordoned: cuda/cuda0: fan noise" in node.accelkit("status").stdout
    assert node.accelkit("uncordon", "cuda", "cuda0").returncode == 0
    assert "was not cordoned" in node.accelkit("uncordon", "cuda", "cuda0").stdout
    both = node.accelkit("run", "--agent", "agent-1", "--slots", "cuda.device=2", "--", "true")
    assert both.returncode == 0, both.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("cuda", "cuda9"), "error: plugin 'cuda' has no device 'cuda9' (devices: cuda0, cuda1)"),
        (("rocm", "x"), "error: no plugin 'rocm' on this node (plugins: cpu, cuda)"),
    ],
)
def test_cordon_of_something_the_node_lacks_is_an_error(
    node: Node, args: tuple[str, str], message: str
) -> None:
    for command in ("cordon", "uncordon"):
        result = node.accelkit(command, *args)
        assert result.returncode == 2
        assert result.stderr.strip() == message


def test_a_cordon_reason_with_control_characters_is_refused(node: Node) -> None:
    result = node.accelkit("cordon", "--reason", "\x1b[2Jcleared\nscreen", "cuda", "cuda0")
    assert result.returncode == 2
    assert "one line of text with no control characters" in result.stderr
    assert "Traceback" not in result.stderr
    assert "cordoned" not in node.accelkit("status").stdout  # nothing was recorded
