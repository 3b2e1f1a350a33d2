"""A container's booking outlives its engine's absence (DESIGN §18, §14 Containment).

dockerd is killed (SIGKILL) while ``accelkit run --runtime docker`` waits for its container:
containerd may run the container on, so its GPU stays booked, liveness ``unknown``, until the
engine answers that the container is gone or ``accelkit release --force`` frees it. Before,
the run freed the GPU at once and the next run was granted it again.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from accelkit.workload import Ledger

from .docker_commands import ACCELKIT, accelkit, environment

if TYPE_CHECKING:
    from .conftest import Engine, MortalEngine

pytestmark = pytest.mark.slow

#: the status of ``accelkit run`` when accelkit itself failed (DESIGN §18, §12)
EXIT_ACCELKIT = 125


def run_gpu(engine: Engine, config: Path, *argv: str, runtime: str = "process") -> list[str]:
    args = ["run", "--config", str(config), "--agent", "agent-1", "--slots", "cuda.device=1"]
    if runtime == "docker":
        args += ["--runtime", "docker", "--image", engine.image]
    return [*ACCELKIT, *args, "--", *argv]


def run_once(engine: Engine, config: Path) -> subprocess.CompletedProcess[str]:
    """A process-runtime run of ``true`` asking for the node's GPU."""
    env = environment(engine.url, config.parent / "state")
    return subprocess.run(
        run_gpu(engine, config, "true"), capture_output=True, text=True, env=env, check=False
    )


def booked(config: Path) -> list[str]:
    return [w for _a, w in Ledger(config.parent / "state").read_all()]


def liveness(engine: Engine, config: Path) -> dict[str, str]:
    shown = accelkit(engine.url, config, "status", "--config", str(config), "--json")
    assert shown.returncode == 0, shown.stderr
    return {row["workload"]: row["liveness"] for row in json.loads(shown.stdout)}


def _waiting(config: Path) -> bool:
    records = list(Ledger(config.parent / "state").read_all().values())
    return bool(records) and "post_create" in records[0].to_json()["hooks"].get("cuda", [])


def lose_the_engine(mortal: MortalEngine, config: Path) -> tuple[str, str]:
    """Run a container holding the node's one GPU, SIGKILL dockerd while it runs; the
    workload's id and the run's stderr."""
    env = environment(mortal.engine.url, config.parent / "state")
    argv = run_gpu(
        mortal.engine, config, "sh", "-c", "echo ready; exec sleep 300", runtime="docker"
    )
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True
    ) as run:
        assert run.stdout is not None
        assert run.stderr is not None
        assert run.stdout.readline() == "ready\n"
        deadline = time.monotonic() + 60
        while not _waiting(config):  # post_create done: accelkit waits for the container
            assert time.monotonic() < deadline, "the run did not reach its wait"
            time.sleep(0.05)  # a poll's pace, not a wait for time to pass
        mortal.kill()
        status = run.wait(120)
        stderr = run.stderr.read()
    assert status == EXIT_ACCELKIT, stderr
    (workload,) = booked(config)
    return workload, stderr


def test_killing_dockerd_keeps_the_gpu_booked_until_the_engine_says_the_container_is_gone(
    mortal_dockerd: MortalEngine, mock_node: Callable[..., Path]
) -> None:
    node = mock_node(gpus=1)
    engine = mortal_dockerd.engine
    workload, stderr = lose_the_engine(mortal_dockerd, node)
    assert f"error: cannot reach the Docker engine at {engine.url}" in stderr
    assert f"workload {workload!r} may still run, so its devices (cuda:cuda0) stay booked" in stderr
    assert f"'accelkit release --force {workload}'" in stderr
    assert "Traceback" not in stderr

    refused = run_once(engine, node)
    assert refused.returncode != 0  # the GPU is not granted again
    assert f"held by {workload!r}" in refused.stderr
    assert "its devices stay booked" in refused.stderr  # why it is kept, named
    assert liveness(engine, node) == {workload: "unknown"}

    mortal_dockerd.start()  # the engine is back: it ends what it no longer supervises
    assert liveness(engine, node) in ({workload: "running"}, {})
    if booked(node):  # it still runs: it ends while no accelkit watches it
        engine.run_cli("kill", workload)
    after = run_once(engine, node)
    assert after.returncode == 0, after.stderr
    assert booked(node) == []
    assert engine.run_cli("ps", "--all", "--quiet").split() == []


def test_release_force_frees_the_gpu_of_a_container_whose_engine_is_gone(
    mortal_dockerd: MortalEngine, mock_node: Callable[..., Path]
) -> None:
    node = mock_node(gpus=1)
    engine = mortal_dockerd.engine
    workload, _stderr = lose_the_engine(mortal_dockerd, node)
    plain = accelkit(engine.url, node, "release", "--config", str(node), workload)
    assert plain.returncode == 2
    assert f"cannot reach workload {workload!r}" in plain.stderr
    assert booked(node) == [workload]

    forced = accelkit(engine.url, node, "release", "--config", str(node), "--force", workload)
    assert forced.returncode == 0, forced.stderr
    assert "--force: skipping stopping the workload" in forced.stderr
    assert f"workload {workload!r} was not stopped: it may still run" in forced.stderr
    assert booked(node) == []
    after = run_once(engine, node)
    assert after.returncode == 0, after.stderr

    mortal_dockerd.start()  # the container no record names is swept when the engine is back
    assert liveness(engine, node) == {}
    deadline = time.monotonic() + 60
    while engine.run_cli("ps", "--all", "--quiet").split():
        assert time.monotonic() < deadline, "the orphan container was not removed"
        liveness(engine, node)  # each full reconciliation sweeps again
