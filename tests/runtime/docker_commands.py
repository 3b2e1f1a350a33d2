"""``accelkit`` run against a test's own container engine: its environment and one command."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .conftest import Engine

#: the ``accelkit`` console script, run by this interpreter
ACCELKIT = [sys.executable, "-c", "from accelkit.cli.app import run; run()"]


def environment(engine_url: str, state: Path) -> dict[str, str]:
    """This process's environment without ``ACCELKIT_*`` or ``DOCKER_*`` (neither a config nor
    another engine leaks in), then the engine at ``engine_url`` and the state directory."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELKIT_", "DOCKER_"))}
    return env | {"DOCKER_HOST": engine_url, "ACCELKIT_STATE_DIR": str(state)}


def accelkit(
    engine_url: str, config: Path, *args: str, command: Sequence[str] = ACCELKIT
) -> subprocess.CompletedProcess[str]:
    """``accelkit ARGS`` (or ``command ARGS``) to its end, against the engine at
    ``engine_url``, with the state directory beside ``config``."""
    return subprocess.run(
        [*command, *args],
        capture_output=True,
        text=True,
        env=environment(engine_url, config.parent / "state"),
        timeout=120,
        check=False,
    )


def kill_a_run_holding_the_gpu(engine: Engine, config: Path) -> None:
    """``accelkit run`` of a container holding the node's one GPU, killed with SIGKILL once
    the container runs: the container and the run's record are left behind."""
    args = ["run", "--config", str(config), "--agent", "agent-1", "--slots", "cuda.device=1"]
    args += ["--runtime", "docker", "--image", engine.image, "--"]
    with subprocess.Popen(
        [*ACCELKIT, *args, "sh", "-c", "echo ready; exec sleep 300"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=environment(engine.url, config.parent / "state"),
        text=True,
    ) as first:
        assert first.stdout is not None
        assert first.stdout.readline() == "ready\n"
        time.sleep(0.5)  # past the start, so the handle is recorded
        first.kill()
        first.wait(30)
