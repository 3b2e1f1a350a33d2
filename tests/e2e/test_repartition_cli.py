"""``accelkit repartition`` as a real process, with ``accelkit serve`` and ``run`` beside it:
new devices wait unassigned in AUTO_SPLIT, are given out, the assignment holds in every later
process, and a device a workload holds never moves."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.test_serve_cli import Node, Serve, write_gpus

pytestmark = pytest.mark.slow

TWO_AGENTS = """
[[agents]]
[agents.agent]
id = "a"
[[agents]]
[agents.agent]
id = "b"
"""


@pytest.fixture
def node(mock_node: Callable[..., Path]) -> Node:
    config = mock_node(cpus=1, gpus=2)
    text = config.read_text().replace(
        "[resource]\n", '[resource]\nallocation-mode = "auto-split"\n'
    )
    config.write_text(text + TWO_AGENTS)
    write_gpus(config.parent / "devices.toml", ["cuda0", "cuda1"])
    return Node(config)


def gpus_of(node: Node, agent: str, n: int) -> tuple[int, str, str]:
    got = node.accelkit(
        "run",
        "--agent",
        agent,
        "--slots",
        f"cuda.device={n}",
        "--",
        "sh",
        "-c",
        "echo $MOCK_CUDA_DEVICES",
    )
    return got.returncode, got.stdout.strip(), got.stderr


def test_new_devices_wait_unassigned_until_repartition_gives_them_out(node: Node) -> None:
    serve = Serve(node)
    try:
        serve.wait_for("serving http://127.0.0.1:")
        write_gpus(node.devices, ["cuda0", "cuda1", "cuda2", "cuda3"])
        serve.wait_for("device cuda/cuda3 is unassigned: 'accelkit repartition' gives it")
        # another process sees the same assignment: b still has cuda1 only
        assert gpus_of(node, "b", 1)[:2] == (0, "cuda1")
        assert gpus_of(node, "b", 2)[0] == 125  # refused by accelkit run
        plan = json.loads(node.accelkit("plan", "--json").stdout)
        assert plan["unassigned"]["cuda"] == ["cuda2", "cuda3"]
        assert plan["agents"]["b"]["devices"]["cuda"] == ["cuda1"]
        done = node.accelkit("repartition", "--json")
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["given"] == {"cuda": {"cuda2": "a", "cuda3": "b"}}
        assert result["moved"] == {}
        assert result["agents"]["b"]["cuda"] == ["cuda1", "cuda3"]
        assert gpus_of(node, "b", 2)[:2] == (0, "cuda1,cuda3")
        assert gpus_of(node, "a", 2)[:2] == (0, "cuda0,cuda2")
        serve.wait_for("plugin 'cuda': agents a, b follow the recorded assignment")
        again = node.accelkit("repartition")
        assert again.returncode == 0, again.stderr
        assert "nothing to change" in again.stdout
        assert serve.stop() == 0
    finally:
        serve.kill()
    assert "Traceback" not in serve.text()


def test_a_held_device_never_moves(node: Node) -> None:
    write_gpus(node.devices, ["cuda0", "cuda1", "cuda2"])
    state = node.config.parent / "state"
    state.mkdir(mode=0o700, exist_ok=True)
    pinned = {
        "format": "accelkit-assignments/1",
        "agents": ["a", "b"],
        "devices": {"cuda": {"a": ["cuda0", "cuda1", "cuda2"], "b": []}},
    }
    (state / "assignments.json").write_text(json.dumps(pinned))
    run = node.accelkit("run", "--agent", "a", "--slots", "cuda.device=3", "--", "true")
    assert run.returncode == 0, run.stderr  # the pin gives a all three
    workload = node.start_workload_of("a", 3)
    try:
        refused = node.accelkit("repartition")
        assert refused.returncode == 2
        assert "agent 'a' would give up a device a workload holds" in refused.stderr
        assert "Traceback" not in refused.stderr
        assert json.loads((state / "assignments.json").read_text()) == pinned  # unchanged
    finally:
        workload.kill()
        workload.wait()


def test_repartition_needs_auto_split(mock_node: Callable[..., Path]) -> None:
    config = mock_node(cpus=1, gpus=2)
    refused = Node(config).accelkit("repartition")
    assert refused.returncode == 2
    assert "error: repartition works in allocation-mode 'auto-split'" in refused.stderr
    assert "'shared'" in refused.stderr


def test_a_damaged_assignment_file_is_a_clear_error(node: Node) -> None:
    state = node.config.parent / "state"
    state.mkdir(mode=0o700, exist_ok=True)
    (state / "assignments.json").write_text("{not json")
    result = node.accelkit("plan")
    assert result.returncode == 2
    assert "assignments.json" in result.stderr
    assert "remove it to split the devices afresh" in result.stderr
    assert "Traceback" not in result.stderr
