"""`accelkit run --runtime docker` end to end, as a real process, against the session's dockerd."""

from __future__ import annotations

import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from accelkit.workload import Ledger

from .docker_commands import ACCELKIT, accelkit, environment, kill_a_run_holding_the_gpu

if TYPE_CHECKING:
    from .conftest import Engine

PAUSING_RUN = Path(__file__).resolve().parents[1] / "fixtures" / "pausing_run.py"
EXAMPLES = Path(__file__).parents[2] / "docs" / "examples"
LIMIT_FILES = "/sys/fs/cgroup/cpuset/cpuset.cpus /sys/fs/cgroup/memory/memory.limit_in_bytes"

pytestmark = pytest.mark.slow


def accelkit_run(
    engine: Engine, config: Path, slots: str, *argv: str, image: str | None = None
) -> subprocess.CompletedProcess[str]:
    args = ["run", "--config", str(config), "--agent", "agent-1", "--slots", slots]
    args += ["--runtime", "docker", "--image", image or engine.image, "--", *argv]
    return accelkit(engine.url, config, *args)


def left_behind(engine: Engine, config: Path) -> tuple[list[str], list[str]]:
    """The containers accelkit made that still exist, and the ledger's records."""
    listed = engine.run_cli("ps", "--all", "--quiet", "--filter", "label=io.accelkit.agent")
    state = config.parent / "state"
    booked = [f"{a}+{w}" for a, w in Ledger(state).read_all()] if state.exists() else []
    return listed.split(), booked


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    """The demo node (mock devices playing cpu, mem and cuda)."""
    for name in ("demo.toml", "mock-devices.toml"):
        shutil.copy(EXAMPLES / name, tmp_path / name)
    return tmp_path / "demo.toml"


@pytest.fixture
def real_node(tmp_path: Path) -> Path:
    """This machine's own cores and memory (the cpu and mem plugins), nothing reserved."""
    config = tmp_path / "host.toml"
    config.write_text(
        '[resource]\nreserved-cpu = 0\nreserved-mem = "0"\n[plugins]\nallowed = ["cpu", "mem"]\n'
    )
    return config


def test_the_demo_node_runs_a_container_with_the_hooks_env(dockerd: Engine, demo: Path) -> None:
    script = f"echo devices=$MOCK_CPU_DEVICES; cat {LIMIT_FILES} >/dev/null && exit 3"
    result = accelkit_run(dockerd, demo, "cpu=1", "sh", "-c", script)
    assert result.returncode == 3, result.stderr
    assert result.stdout.startswith("devices=")
    assert result.stdout.strip() != "devices="
    assert "on agent agent-1" in result.stderr
    assert "Traceback" not in result.stderr
    assert left_behind(dockerd, demo) == ([], [])


def test_the_container_gets_the_cores_and_memory_it_was_given(
    dockerd: Engine, real_node: Path
) -> None:
    result = accelkit_run(dockerd, real_node, "cpu=1,mem=64M", "sh", "-c", f"cat {LIMIT_FILES}")
    assert result.returncode == 0, result.stderr
    cpus, limit = result.stdout.split()
    assert cpus.isdigit()  # one core, not the machine's list
    assert limit == str(64 * 1024 * 1024)
    assert f"cpu:{cpus}" in result.stderr
    assert left_behind(dockerd, real_node) == ([], [])


def test_a_missing_image_exits_125_with_nothing_booked(dockerd: Engine, demo: Path) -> None:
    result = accelkit_run(dockerd, demo, "cpu=1", "true", image="no/such:image")
    assert result.returncode == 125
    assert (
        "error: image 'no/such:image' not found; load it with docker load/import" in result.stderr
    )
    assert "Traceback" not in result.stderr
    assert left_behind(dockerd, demo) == ([], [])


def test_an_engine_that_does_not_run_exits_125_with_nothing_booked(
    dockerd: Engine, demo: Path, tmp_path: Path
) -> None:
    gone = dockerd.__class__(f"unix://{tmp_path}/no-engine.sock", dockerd.image, dockerd.cli)
    result = accelkit_run(gone, demo, "cpu=1", "true")
    assert result.returncode == 125
    expected = f"error: cannot reach the Docker engine at unix://{tmp_path}/no-engine.sock: "
    assert expected in result.stderr
    assert "Traceback" not in result.stderr
    assert left_behind(dockerd, demo) == ([], [])


def test_an_oom_kill_exits_137_and_says_so(dockerd: Engine, real_node: Path) -> None:
    fill = "x=$(head -c 200000000 /dev/zero | tr '\\0' a)"
    result = accelkit_run(dockerd, real_node, "cpu=1,mem=32M", "sh", "-c", fill)
    assert result.returncode == 137, result.stderr
    assert "killed by the kernel's OOM killer" in result.stderr
    assert left_behind(dockerd, real_node) == ([], [])


def test_sigterm_stops_a_container_that_ignores_it_after_the_grace(
    dockerd: Engine, demo: Path
) -> None:
    args = ["run", "--config", str(demo), "--agent", "agent-1", "--slots", "cpu=1", "--grace", "1"]
    args += ["--runtime", "docker", "--image", dockerd.image, "--"]
    args += ["sh", "-c", "trap '' TERM; echo ready; while :; do sleep 1; done"]
    env = environment(dockerd.url, demo.parent / "state")
    with subprocess.Popen(
        [*ACCELKIT, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True
    ) as run:
        assert run.stdout is not None
        assert run.stdout.readline() == "ready\n"
        # the container prints before the engine's answer to the start reaches accelkit: a
        # signal in between aborts the run (143) instead of going to the container
        time.sleep(0.5)
        sent = time.monotonic()
        run.send_signal(signal.SIGTERM)
        status = run.wait(60)
        took = time.monotonic() - sent
    assert status == 137  # the SIGKILL after the grace ended it
    assert 1.0 <= took < 15.0
    assert left_behind(dockerd, demo) == ([], [])


def _median_wall(argv: list[str], env: dict[str, str], times: int) -> float:
    walls = []
    for _ in range(times):
        begun = time.perf_counter()
        subprocess.run(argv, env=env, check=True, capture_output=True)
        walls.append(time.perf_counter() - begun)
    return statistics.median(walls)


def test_run_overhead_beside_docker_run(dockerd: Engine, demo: Path) -> None:
    """``accelkit run --runtime docker -- true`` beside ``docker run --rm`` of the same image.

    Prints the medians; ``pytest tests/runtime/test_docker_cli.py -k overhead -s`` shows them.
    """
    env = environment(dockerd.url, demo.parent / "state")
    times = 7
    docker_run = [*dockerd.cli, "run", "--rm", dockerd.image, "true"]
    args = ["run", "--config", str(demo), "--agent", "agent-1", "--slots", "cpu=1"]
    ours = [*ACCELKIT, *args, "--runtime", "docker", "--image", dockerd.image, "--", "true"]
    process = [*ACCELKIT, *args, "--", "true"]
    _median_wall(docker_run, env, 1)  # warm-up: the engine's first container
    floor = _median_wall(docker_run, env, times)
    accelkit = _median_wall(ours, env, times)
    in_process = _median_wall(process, env, times)
    import_only = _median_wall([sys.executable, "-c", "import accelkit.cli.app"], env, times)
    print(
        f"\ndocker run --rm: {floor * 1000:.0f} ms; accelkit run --runtime docker: "
        f"{accelkit * 1000:.0f} ms ({accelkit / floor:.2f}x); accelkit run (process runtime): "
        f"{in_process * 1000:.0f} ms; python -c 'import accelkit.cli.app': "
        f"{import_only * 1000:.0f} ms (medians of {times})"
    )
    assert accelkit < 10 * floor
    assert left_behind(dockerd, demo) == ([], [])


def test_the_same_run_through_podman(podman_service: Engine, real_node: Path) -> None:
    result = accelkit_run(
        podman_service, real_node, "cpu=1,mem=64M", "sh", "-c", f"cat {LIMIT_FILES}; exit 5"
    )
    assert result.returncode == 5, result.stderr
    cpus, limit = result.stdout.split()
    assert (cpus.isdigit(), limit) == (True, str(64 * 1024 * 1024))
    listed = podman_service.run_cli("ps", "--all", "--quiet", "--filter", "label=io.accelkit.agent")
    assert listed.split() == []


def test_a_container_outliving_a_killed_accelkit_keeps_its_device_until_it_ends(
    dockerd: Engine, mock_node: Callable[..., Path]
) -> None:
    """kill -9 of ``accelkit run``: the engine, asked by the next run, says the container
    lives, so its GPU stays booked; once it has ended the next run tears it down."""
    node = mock_node(gpus=1)
    kill_a_run_holding_the_gpu(dockerd, node)
    (container,) = left_behind(dockerd, node)[0]
    refused = accelkit_run(dockerd, node, "cuda.device=1", "true")
    assert refused.returncode == 125
    assert "cuda.device" in refused.stderr
    dockerd.run_cli("kill", container)  # the workload ends while no accelkit watches it
    after = accelkit_run(dockerd, node, "cuda.device=1", "true")
    assert after.returncode == 0, after.stderr
    assert left_behind(dockerd, node) == ([], [])


STEPS = [
    "booked", "pre_create:cuda", "prepared", "created", "spawned", "post_create:cuda", "running",
    "exited", "pre_terminate:cuda", "post_terminate:cuda",
]  # fmt: skip


def _paused(run: subprocess.Popen[str], step: str) -> None:
    """Read ``run``'s stderr until it says it paused at ``step``."""
    assert run.stderr is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = run.stderr.readline()
        if f"paused at {step}" in line:
            return
        assert line, f"accelkit ended before {step}: status {run.wait()}"
    pytest.fail(f"accelkit did not reach {step}")


@pytest.mark.parametrize("step", STEPS)
def test_kill_9_at_every_step_leaves_no_device_booked_and_no_container(
    dockerd: Engine, mock_node: Callable[..., Path], step: str
) -> None:
    """Once the container has ended (the test kills a running one), the next run gets the GPU
    and finds nothing of the killed run: no record, no container."""
    node = mock_node(gpus=1)
    args = ["run", "--config", str(node), "--agent", "agent-1", "--slots", "cuda.device=1"]
    args += ["--runtime", "docker", "--image", dockerd.image, "--"]
    command = ["true"] if step.startswith(("exited", "pre_term", "post_term")) else ["sleep", "300"]
    env = environment(dockerd.url, node.parent / "state")
    with subprocess.Popen(
        [sys.executable, str(PAUSING_RUN), step, *args, *command],  # pauses at step
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    ) as run:
        _paused(run, step)
        run.kill()
        run.wait(30)
    running = dockerd.run_cli("ps", "--quiet", "--filter", "label=io.accelkit.agent").split()
    if running:  # its GPU is not given to anyone else while it runs
        assert accelkit_run(dockerd, node, "cuda.device=1", "true").returncode == 125
    assert bool(running) == (step in {"spawned", "post_create:cuda", "running"})
    for container in running:
        dockerd.run_cli("kill", container)
    after = accelkit_run(dockerd, node, "cuda.device=1", "true")
    assert after.returncode == 0, after.stderr
    assert left_behind(dockerd, node) == ([], [])


#: ``accelkit run`` that stops right after the engine created the container, before the ledger
#: records its handle (the window no checkpoint marks), until it is killed
_PAUSE_BEFORE_RECORDING = """
import sys, time
import pytest
from accelkit.cli.app import run
from accelkit.node import Node

def record_handle(self, key, handle):
    print("accelkit: paused before recording", handle.ident, file=sys.stderr, flush=True)
    while True:
        time.sleep(3600)

pytest.MonkeyPatch().setattr(Node, "record_handle", record_handle)
sys.argv = ["accelkit", *sys.argv[1:]]
run()
"""


def test_kill_9_between_the_create_and_its_record_leaves_no_container(
    dockerd: Engine, mock_node: Callable[..., Path]
) -> None:
    """The ledger has the booking but not the container: the next run finds the container by
    the workload id it is named after, removes it and frees the GPU."""
    node = mock_node(gpus=1)
    args = ["run", "--config", str(node), "--agent", "agent-1", "--slots", "cuda.device=1"]
    args += ["--runtime", "docker", "--image", dockerd.image, "--", "sleep", "300"]
    with subprocess.Popen(
        [sys.executable, "-c", _PAUSE_BEFORE_RECORDING, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=environment(dockerd.url, node.parent / "state"),
        text=True,
    ) as run:
        assert run.stderr is not None
        for line in run.stderr:  # the workload's devices, then the pause
            if "paused before recording" in line:
                break
        else:
            pytest.fail(f"accelkit ended before the create: status {run.wait()}")
        run.kill()
        run.wait(30)
    containers, booked = left_behind(dockerd, node)
    assert len(containers) == 1  # created, never started, named after the workload id
    assert len(booked) == 1
    (record,) = Ledger(node.parent / "state").read_all().values()
    assert record.handle is None
    name = dockerd.run_cli("inspect", "--format", "{{.Name}}", containers[0]).strip()
    assert name.lstrip("/") == record.workload.id
    after = accelkit_run(dockerd, node, "cuda.device=1", "true")
    assert after.returncode == 0, after.stderr
    assert left_behind(dockerd, node) == ([], [])
