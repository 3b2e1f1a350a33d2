"""``accelkit status`` starts with what it reads: a ledger whose records name no container
engine imports no docker module, no runtime is imported to answer it, and the plugins are
found without the metadata library."""

from __future__ import annotations

from pathlib import Path

import pytest

from .imported_modules import modules_of

#: what a status of process workloads never needs: the container engine's modules and the
#: orphan sweep's (not imported when the ledger noted no engine), the tracking runtimes and the
#: lifecycle (imported where a teardown is finished; this ledger has none to finish), the
#: metadata library and its email parser (entry points are read from the metadata directories),
#: the pins of an auto-split node (this one is shared), the scanner that places a config
#: file's errors on their lines (these files have none)
NOT_ON_THE_WAY = (
    "accelkit.host.pinning",
    "importlib.metadata",
    "email.feedparser",
    "accelkit.runtime.docker",
    "accelkit.runtime.docker_values",
    "accelkit.runtime.docker_ops",
    "aiodocker",
    "accelkit.runtime.kubelet_pods",
    "accelkit.runtime.slurm_jobs",
    "accelkit.runtime.k8s_claims",
    "accelkit.workload.lifecycle",
    "accelkit.workload.recorded_lifecycle",
    "accelkit.workload.validate",
    "accelkit.workload.orphans",
    "accelkit.config.lines",
)


@pytest.fixture
def imported(mock_node) -> set[str]:
    config: Path = mock_node(cpus=2, mem="4G", gpus=1)
    # a process run first: the ledger holds what it booked and released
    modules_of(
        "run", "--config", str(config), "--agent", "agent-1", "--slots", "cpu=1", "--", "true"
    )
    return modules_of("status", "--config", str(config))


@pytest.mark.parametrize("module", NOT_ON_THE_WAY)
def test_a_status_does_not_import(imported, module):
    assert "accelkit.cli.status_cmd" in imported  # the listing is the status's
    assert module not in imported
