"""Fixtures of the Kubernetes bridge tests.

``k8s_cluster`` is one real single-node cluster per test session (see ``real_cluster.py``),
started on first use and stopped at the end. Where it cannot run (not root, no containerd, no
``../shared/k8s`` beside the repository) its tests skip with the reason; with
``ACCELKIT_REQUIRE_K8S=1`` (set by ``.ci/run`` as root) that is a failure instead.
``ACCELKIT_K8S_CLUSTER=DIR`` uses the cluster already running in ``DIR`` (``start-cluster.sh
DIR``) and leaves it running, for a developer running these tests more than once.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from . import real_cluster

REQUIRE_K8S = "ACCELKIT_REQUIRE_K8S"
RUNNING_CLUSTER = "ACCELKIT_K8S_CLUSTER"


def unavailable(reason: str) -> None:
    if os.environ.get(REQUIRE_K8S) == "1":
        pytest.fail(f"{reason} ({REQUIRE_K8S}=1: CI must run these tests)")
    pytest.skip(reason)


#: seconds a test that uses the cluster may take, its start (with tries) included
CLUSTER_TEST_TIMEOUT = 600


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The first test to use ``k8s_cluster`` starts it: more than the default time limit."""
    for item in items:
        uses = "k8s_cluster" in getattr(item, "fixturenames", ())
        if uses and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(CLUSTER_TEST_TIMEOUT))


@pytest.fixture
def k8s_root() -> Iterator[Path]:
    """A short directory (unix socket paths are limited to 107 bytes)."""
    root = Path(tempfile.mkdtemp(prefix="ak8s-", dir="/tmp"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def k8s_cluster() -> Iterator[real_cluster.Cluster]:
    """A running cluster: ``.env`` (``KUBECONFIG``, ``K8S_*``), ``.kubectl(...)``, and more."""
    reason = real_cluster.missing()
    if reason is not None:
        unavailable(reason)
    if running := os.environ.get(RUNNING_CLUSTER):
        env = real_cluster.read_env(Path(running) / "env")
        yield real_cluster.Cluster(Path(running), env, real_cluster.binaries() / "bin", 0.0)
        return
    try:
        cluster = real_cluster.start()
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        unavailable(f"the Kubernetes test cluster cannot start here: {exc}")
        raise
    try:
        yield cluster
    finally:
        cluster.stop()
