"""A ledger deleted beside a running container labelled with its identity is refused
(DESIGN §18): the container keeps its GPU, nothing takes the empty ledger as new, and the
orphan sweep of a new ledger never reaches the container."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from .docker_commands import ACCELKIT, environment

if TYPE_CHECKING:
    from .conftest import Engine

pytestmark = pytest.mark.slow


def test_a_deleted_ledger_beside_a_labelled_container_is_refused(
    dockerd: Engine, mock_node: Callable[..., Path]
) -> None:
    node = mock_node(gpus=1)
    state = node.parent / "state"
    env = environment(dockerd.url, state)
    base = [*ACCELKIT, "run", "--config", str(node), "--agent", "agent-1"]
    base += ["--slots", "cuda.device=1"]
    docker = ["--runtime", "docker", "--image", dockerd.image]
    holder = subprocess.Popen(
        [*base, *docker, "--", "sh", "-c", "echo ready; exec sleep 300"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "ready\n"
        old_id = (state / "ledger.id").read_text().strip()
        labelled = dockerd.run_cli(
            "ps", "--quiet", "--filter", f"label=io.accelkit.ledger={old_id}"
        ).split()
        assert len(labelled) == 1
        for name in ("ledger.db", "ledger.db-wal", "ledger.db-shm"):
            (state / name).unlink(missing_ok=True)

        for argv in ([*base, *docker, "--", "true"], [*ACCELKIT, "status", "--config", str(node)]):
            refused = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
            assert refused.returncode != 0, refused.stderr
            assert f"ledger.id says {old_id}, the database carries none" in refused.stderr
            assert f"containers labelled io.accelkit.ledger={old_id}" in refused.stderr
        assert not (state / "ledger.db").exists()
        running = dockerd.run_cli("ps", "--quiet", "--filter", f"label=io.accelkit.ledger={old_id}")
        assert running.split() == labelled  # neither granted again nor swept
    finally:
        holder.terminate()  # forwarded to the container: it ends and is removed
        holder.communicate(timeout=120)
