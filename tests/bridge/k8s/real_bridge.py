"""``accelkit k8s-device-plugin`` on the real cluster's kubelet, and pods that use it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .bridge_process import BridgeProcess
from .real_cluster import Cluster

GPU = "accelkit.io/cuda.device"

HOST = """\
[resource]
reserved-cpu = 0
reserved-mem = "0"
state-dir = "{root}/state"
[plugins]
allowed = ["mock"]
[plugins.config.mock]
config-file = "devices.toml"
[bridge.k8s]
kubelet-dir = "{dp}"
pod-resources-socket = "{pr}"
release-interval = "{interval}"
admission-grace = "{grace}"
kubelet-settle = "{settle}"
"""


def devices(gpus: int) -> str:
    lines = ["[[kinds]]", 'key = "cuda"']
    for i in range(gpus):
        lines += ["[[kinds.devices]]", f'id = "cuda{i}"', "numa-node = 0"]
    return "\n".join(lines) + "\n"


@contextmanager
def bridge_on(
    cluster: Cluster,
    root: Path,
    *,
    gpus: int,
    interval: str = "0.5",
    grace: str = "30",
    settle: str = "10",
) -> Iterator[BridgeProcess]:
    """A bridge of ``gpus`` mock GPUs registered with the cluster's kubelet; when the block
    ends, every pod of the namespace is deleted (while the bridge still runs) and it stops."""
    (root / "devices.toml").write_text(devices(gpus))
    config = root / "host.toml"
    config.write_text(
        HOST.format(
            root=root,
            dp=cluster.device_plugin_dir,
            pr=cluster.pod_resources_socket,
            interval=interval,
            grace=grace,
            settle=settle,
        )
    )
    bridge = BridgeProcess(config)
    try:
        bridge.wait_event(lambda e: e["event"] == "registered" and e["resource"] == GPU)
        cluster.wait_for(lambda: cluster.allocatable(GPU) == gpus, f"{gpus} {GPU} allocatable")
        yield bridge
    finally:
        try:
            cluster.delete_all_pods()
        finally:
            bridge.stop()


def pod(
    name: str,
    *,
    gpus: int = 1,
    init_gpus: int = 0,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A busybox pod (spec) that prints the devices it got and sleeps."""
    limits = {"limits": {GPU: str(gpus)}}
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {
                "name": "main",
                "image": "accelkit.local/busybox:1",
                "command": ["sh", "-c", "echo got=$MOCK_CUDA_DEVICES; exec sleep 600"],
                "resources": limits,
            }
        ],
    }
    if init_gpus:
        spec["initContainers"] = [
            {
                "name": "init",
                "image": "accelkit.local/busybox:1",
                "command": ["sh", "-c", "echo init=$MOCK_CUDA_DEVICES"],
                "resources": {"limits": {GPU: str(init_gpus)}},
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
    }


def deployment(name: str, replicas: int) -> str:
    template = pod(name, labels={"app": name})
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": template["metadata"], "spec": template["spec"]},
        },
    }
    return json.dumps(body)


def pods_of(cluster: Cluster, app: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = cluster.get("pods", "-l", f"app={app}")["items"]
    return found


def rejected(pods: list[dict[str, Any]]) -> list[str]:
    """The pods the kubelet failed at admission (an ``Allocate`` refused)."""
    return [
        f"{p['metadata']['name']}: {p['status'].get('message', '')}"
        for p in pods
        if p["status"].get("phase") == "Failed"
    ]


def running(cluster: Cluster, name: str) -> bool:
    return cluster.pod_phase(name) == "Running"


def pod_bookings(bridge: BridgeProcess) -> list[dict[str, Any]]:
    return [w for w in bridge.workloads() if w["runtime"] == "kubelet-pods"]
