"""The real single-node cluster the Kubernetes tests run against comes up and runs pods."""

from __future__ import annotations

import pytest

from .real_cluster import Cluster

pytestmark = pytest.mark.k8s


def test_cluster_runs_a_pod_and_restarts_its_kubelet(k8s_cluster: Cluster) -> None:
    node = k8s_cluster.get("node", k8s_cluster.node)
    ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
    assert ready[0]["status"] == "True"
    assert k8s_cluster.pod_resources_socket.exists()
    assert k8s_cluster.device_plugin_dir.is_dir()
    before = k8s_cluster.kubelet_pid()
    k8s_cluster.restart_kubelet()
    assert k8s_cluster.kubelet_pid() != before
    k8s_cluster.kubectl(
        "run", "fixture-check", "--image=accelkit.local/busybox:1", "--restart=Never",
        "--command", "--", "sh", "-c", "echo up; sleep 600",
    )  # fmt: skip
    try:
        k8s_cluster.wait_for(
            lambda: k8s_cluster.pod_phase("fixture-check") == "Running", "the pod to run"
        )
        logs = k8s_cluster.wait_for(
            lambda: k8s_cluster.kubectl("logs", "fixture-check", check=False).stdout,
            "the pod's output",
        )
        assert logs.strip() == "up"
    finally:
        k8s_cluster.kubectl("delete", "pod", "fixture-check", "--grace-period=0", "--force")
