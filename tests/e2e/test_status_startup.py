"""``accelkit status`` starts with what it reads: a ledger whose records name no container
engine imports no docker module, and no runtime is imported to answer it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from accelkit.testing.cli_runner import cli_env

#: the status command, printing every module imported once the command is done
STATUS_LISTING_MODULES = """
import atexit, sys
atexit.register(lambda: print(*sorted(sys.modules), file=sys.stderr))
from accelkit.cli.app import run
sys.argv = ["accelkit", *sys.argv[1:]]
run()
"""

#: what a status of process workloads never needs: the container engine's modules (the
#: orphan sweep asks no engine when the ledger noted none) and the tracking runtimes
NOT_ON_THE_WAY = (
    "accelkit.runtime.docker",
    "accelkit.runtime.docker_values",
    "accelkit.runtime.docker_ops",
    "aiodocker",
    "accelkit.runtime.kubelet_pods",
    "accelkit.runtime.slurm_jobs",
    "accelkit.runtime.k8s_claims",
)


def _modules_of(config: Path, *argv: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", STATUS_LISTING_MODULES, *argv, "--config", str(config)],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return set(done.stderr.split())


@pytest.fixture
def imported(mock_node) -> set[str]:
    config: Path = mock_node(cpus=2, mem="4G", gpus=1)
    # a process run first: the ledger holds what it booked and released
    _modules_of(config, "run", "--agent", "agent-1", "--slots", "cpu=1", "--", "true")
    return _modules_of(config, "status")


@pytest.mark.parametrize("module", NOT_ON_THE_WAY)
def test_a_status_does_not_import(imported, module):
    assert "accelkit.cli.status_cmd" in imported  # the listing is the status's
    assert module not in imported
