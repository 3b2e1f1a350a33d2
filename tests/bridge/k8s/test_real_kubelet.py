"""The device-plugin bridge on a real kubelet (the session's single-node cluster).

Each test starts ``accelkit k8s-device-plugin`` over its own node of mock GPUs, registered with
the cluster's kubelet, and runs real pods; the kubelet's own behaviour is what is tested
against: devices handed out again after a pod left, init containers' devices reused, static
pods missing from PodResources right after a kubelet restart, its PodResources rate limit.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import grpc
import pytest

from accelkit.runtime.kubelet_api import podresources_v1_pb2 as pr
from accelkit.runtime.kubelet_api import podresources_v1_pb2_grpc as pr_grpc

from .real_bridge import (
    GPU,
    bridge_on,
    deployment,
    pod,
    pod_bookings,
    pods_of,
    rejected,
    running,
)
from .real_cluster import Cluster

pytestmark = pytest.mark.k8s


def _logs(cluster: Cluster, name: str, container: str = "main") -> str:
    return str(
        cluster.wait_for(
            lambda: cluster.kubectl("logs", name, "-c", container, check=False).stdout,
            f"the output of {name}/{container}",
        )
    )


def test_a_rollout_restart_hands_the_device_over(k8s_cluster: Cluster, k8s_root: Path) -> None:
    """S6: the replacement pod gets the device the old pod left within the admission grace
    (30 s); the old booking is handed over instead of failing the new pod at admission."""
    with bridge_on(k8s_cluster, k8s_root, gpus=1) as bridge:
        k8s_cluster.apply(deployment("storm", 1))
        first = k8s_cluster.wait_for(
            lambda: [p["metadata"]["name"] for p in pods_of(k8s_cluster, "storm")
                     if p["status"].get("phase") == "Running"],
            "the deployment's pod to run",
        )[0]  # fmt: skip
        k8s_cluster.kubectl("rollout", "restart", "deployment/storm")

        def replacement() -> str | None:
            pods = pods_of(k8s_cluster, "storm")
            assert not rejected(pods), rejected(pods)
            names = [
                p["metadata"]["name"]
                for p in pods
                if p["status"].get("phase") == "Running" and p["metadata"]["name"] != first
            ]
            return names[0] if names else None

        second = k8s_cluster.wait_for(replacement, "the replacement pod to run", 120)
        assert rejected(pods_of(k8s_cluster, "storm")) == []
        bridge.wait_event(lambda e: e["event"] == "pod" and f"/{second}/" in e["pod"])
        [booking] = pod_bookings(bridge)
        assert booking["handle"] == f"default/{second}/main"
        assert booking["devices"] == {"cuda": ["cuda0"]}


def test_an_init_containers_device_is_reused_by_the_app(
    k8s_cluster: Cluster, k8s_root: Path
) -> None:
    """S10: the kubelet gives the app container the init container's device (a second
    Allocate of the same ids): the same pod, the same booking."""
    with bridge_on(k8s_cluster, k8s_root, gpus=2) as bridge:
        k8s_cluster.apply(json.dumps(pod("reuse", init_gpus=1)))
        k8s_cluster.wait_for(lambda: running(k8s_cluster, "reuse"), "the pod to run", 90)
        init = _logs(k8s_cluster, "reuse", "init").strip().removeprefix("init=")
        assert _logs(k8s_cluster, "reuse").strip() == f"got={init}"
        bridge.wait_event(lambda e: e["event"] == "pod" and "/reuse/" in e["pod"])
        [booking] = pod_bookings(bridge)
        assert booking["devices"] == {"cuda": [init]}
        assert booking["workload"] == f"k8s:{GPU}:{init}"


def test_a_device_accelkit_run_holds_is_unhealthy_to_the_kubelet(
    k8s_cluster: Cluster, k8s_root: Path
) -> None:
    """S9: the kubelet neither counts nor picks a device another workload holds, so pods get
    the free one or wait (never rejected); the bridge and ``accelkit status`` say why."""
    with bridge_on(k8s_cluster, k8s_root, gpus=2, interval="0.2") as bridge:
        run = bridge.popen_accelkit("run", "--slots", "cuda.device=1", "--", "sleep", "600")
        try:
            held = bridge.wait_run_workload()
            [device] = held["devices"]["cuda"]
            event = bridge.wait_event(lambda e: e["event"] == "held" and e["device"] == device)
            assert repr(held["workload"]) in event["message"]
            k8s_cluster.wait_for(lambda: k8s_cluster.allocatable(GPU) == 1, "1 allocatable")
            k8s_cluster.apply(json.dumps(pod("first")))
            k8s_cluster.wait_for(lambda: running(k8s_cluster, "first"), "the first pod to run")
            assert _logs(k8s_cluster, "first").strip() != f"got={device}"
            k8s_cluster.apply(json.dumps(pod("second")))

            def unschedulable() -> bool:
                status = k8s_cluster.get("pod", "second")["status"]
                assert status.get("phase") != "Failed", status
                return any(
                    c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
                    for c in status.get("conditions", [])
                )

            k8s_cluster.wait_for(unschedulable, "the second pod to wait for a device")
            rows = {w["workload"]: w for w in bridge.workloads()}
            [note] = rows[held["workload"]]["notes"]
            assert f"advertised Unhealthy to the kubelet as {GPU}" in note["text"]
        finally:
            run.terminate()
            run.wait(timeout=60)
        bridge.wait_event(lambda e: e["event"] == "free" and e["device"] == device)
        k8s_cluster.wait_for(lambda: running(k8s_cluster, "second"), "the second pod to run", 90)
        assert _logs(k8s_cluster, "second").strip() == f"got={device}"


def _listed(cluster: Cluster, device: str) -> bool:
    try:
        with grpc.insecure_channel(f"unix://{cluster.pod_resources_socket}") as channel:
            stub = pr_grpc.PodResourcesListerStub(channel)  # type: ignore[no-untyped-call]
            reply = stub.List(pr.ListPodResourcesRequest(), timeout=5)
    except grpc.RpcError:
        return False
    return any(
        device in d.device_ids
        for p in reply.pod_resources
        for c in p.containers
        for d in c.devices
        if d.resource_name == GPU
    )


def test_a_static_pods_booking_survives_kubelet_restarts(
    k8s_cluster: Cluster, k8s_root: Path
) -> None:
    """S14: right after it starts, the kubelet lists no static pod for a moment; a bridge that
    reconciles every 0.05 s must not free a static pod's device then."""
    manifest = k8s_cluster.root / "manifests" / "gpu-static.json"
    name = f"gpu-static-{k8s_cluster.node}"
    with bridge_on(k8s_cluster, k8s_root, gpus=1, interval="0.05", grace="1", settle="3") as bridge:
        try:
            manifest.write_text(json.dumps(pod("gpu-static")))
            k8s_cluster.wait_for(lambda: running(k8s_cluster, name), "the static pod to run", 90)
            [booking] = k8s_cluster.wait_for(lambda: pod_bookings(bridge), "the booking")
            booked_at = time.time() - booking["age_s"]
            k8s_cluster.wait_for(lambda: time.time() > booked_at + 2, "the admission grace")
            registered = len([e for e in bridge.events if e["event"] == "registered"])
            for restart in range(1, 4):
                k8s_cluster.restart_kubelet()
                bridge.wait_event(
                    lambda e, n=restart: len(
                        [x for x in bridge.events if x["event"] == "registered"]
                    ) >= registered + n
                )  # fmt: skip
                k8s_cluster.wait_for(lambda: _listed(k8s_cluster, "cuda0"), "the pod listed")
            assert [e for e in bridge.events if e["event"] == "released"] == []
            [still] = pod_bookings(bridge)
            assert (still["workload"], still["handle"]) == (
                booking["workload"],
                f"default/{name}/main",
            )
            taken = bridge.accelkit("run", "--slots", "cuda.device=1", "--", "true")
            assert taken.returncode != 0
            assert booking["workload"] in taken.stderr
        finally:
            manifest.unlink(missing_ok=True)
        # gone for good: released once the kubelet has settled and two reads agree
        bridge.wait_event(lambda e: e["event"] == "released", timeout=90)
        assert pod_bookings(bridge) == []


@pytest.mark.timeout(300)  # 16 pods to start on a busy 2-core machine
def test_many_pods_are_judged_with_one_pod_resources_call(
    k8s_cluster: Cluster, k8s_root: Path
) -> None:
    """S13: the kubelet allows PodResources 100 calls a second in bursts of 10; ``accelkit
    status`` of many pod bookings asks once, and another consumer polling beside the bridge
    is never refused."""
    count = 16
    with bridge_on(k8s_cluster, k8s_root, gpus=count, interval="0.2", grace="1") as bridge:
        k8s_cluster.apply(deployment("many", count))
        k8s_cluster.wait_for(
            lambda: len([p for p in pods_of(k8s_cluster, "many")
                         if p["status"].get("phase") == "Running"]) == count,
            f"{count} pods to run", 240, 1.0,
        )  # fmt: skip
        refused: list[str] = []
        done = threading.Event()

        def consumer() -> None:  # a monitoring agent asking 10 times a second
            with grpc.insecure_channel(f"unix://{k8s_cluster.pod_resources_socket}") as channel:
                stub = pr_grpc.PodResourcesListerStub(channel)  # type: ignore[no-untyped-call]
                while not done.wait(0.1):
                    try:
                        stub.List(pr.ListPodResourcesRequest(), timeout=5)
                    except grpc.RpcError as exc:
                        refused.append(str(exc.code()))

        polling = threading.Thread(target=consumer, daemon=True)
        polling.start()
        try:
            booked = time.time()
            k8s_cluster.wait_for(lambda: time.time() > booked + 1.5, "the admission grace")
            for _ in range(3):
                rows = pod_bookings(bridge)
                assert len(rows) == count
                assert {w["liveness"] for w in rows} == {"running"}, rows
        finally:
            done.set()
            polling.join()
        assert refused == []
