"""``accelkit run`` starts with what a run needs: the modules of other commands are not
imported on its way."""

from __future__ import annotations

from pathlib import Path

import pytest

from .imported_modules import modules_of

#: what a run never needs: rediscovery (the node service's), the random-token module,
#: the metadata library and its parser (entry points are read from the metadata directories,
#: a distribution's name for a message only),
#: the metric types (the mock plugin imports them when metrics are gathered), the operators'
#: status and release, the orphan container sweep (a process run does not sweep), the other
#: runtimes (a node knows them by name and imports one when it is asked for), a terminal's
#: handling (the run has none), a manual node's partitioning, fraction maps and the W3-type
#: FILL scan (this node's maps are all discrete)
NOT_ON_THE_WAY = (
    "secrets",
    "importlib.metadata",
    "email.feedparser",
    "accelkit.node.rediscovery",
    "accelkit.node.context_swap",
    "accelkit.metrics",
    "accelkit_mock.metrics",
    "accelkit.workload.status",
    "accelkit.workload.operator_status",
    "accelkit.workload.operator_release",
    "accelkit.workload.orphans",
    "accelkit.runtime.docker",
    "accelkit.runtime.kubelet_pods",
    "accelkit.runtime.slurm_jobs",
    "accelkit.runtime.k8s_claims",
    "accelkit.workload.terminal",
    "accelkit.partition.manual",
    "accelkit.allocmap.fraction",
    "accelkit.allocmap.fillscan",
)


@pytest.fixture
def imported(mock_node) -> set[str]:
    config: Path = mock_node(cpus=2, mem="4G", gpus=1)
    return modules_of(
        "run", "--config", str(config), "--agent", "agent-1", "--slots", "cpu=1", "--", "true"
    )


@pytest.mark.parametrize("module", NOT_ON_THE_WAY)
def test_a_run_does_not_import(imported, module):
    assert "accelkit.cli.run_cmd" in imported  # the listing is the run's
    assert module not in imported
