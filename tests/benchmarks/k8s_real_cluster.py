"""The device-plugin bridge on a real kubelet: cluster start-up, Allocate against its floor,
a rollout restart.

Needs root and the single-node cluster of ``../shared/k8s`` beside the repository (see
``tests/bridge/k8s/real_cluster.py``). Run from the repository root::

    .venv/bin/python tests/benchmarks/k8s_real_cluster.py --starts 3 --allocations 100 --runs 6 \
        --churn 120

``--cluster DIR`` uses a cluster already running (``start-cluster.sh DIR``) instead of starting
any (no ``startup``); ``--no-rollout``, ``--churn 0`` and ``--pods 0`` leave those parts out.

- ``startup``: seconds from ``start-cluster.sh`` until pods can be made (node Ready, untainted,
  default service account), each a fresh cluster folder (binaries unpacked once before), and
  ``stop-cluster.sh``; the last cluster stays up for the rest.
- ``allocate``: ``accelkit k8s-device-plugin`` over ``--allocations`` mock GPUs, registered with
  the real kubelet; on the plugin's socket in the kubelet's device-plugins folder, each call an
  ``Allocate`` of one GPU not booked yet, each preceded by ``GetDevicePluginOptions`` on the
  same channel (the floor: a gRPC round trip with no work). Per run (a fresh ledger and bridge):
  median and p95 in ms, and the ratio of the medians.
- ``rollout``: a one-GPU Deployment (``Recreate``), ``kubectl rollout restart`` as soon as its
  pod runs: the pods the kubelet rejected (must be 0) and seconds until the new pod ran.
- ``churn``: a Deployment of 8 one-GPU pods over 4 GPUs; every half second a running pod is
  deleted (its Deployment makes another) for ``--churn`` seconds: pods the kubelet rejected and
  GPUs PodResources listed in two pods at once (both must be 0).
- ``many_pods``: ``--pods`` one-GPU pods (the kubelet's limit is 110), then ``accelkit status``
  three times while another PodResources consumer asks 10 times a second (the kubelet allows
  100 a second, bursts of 10): bookings not ``running`` and the consumer's refused calls (both
  must be 0), and how long each ``status`` took.

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import grpc

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "bridge"))

from k8s import real_cluster  # noqa: E402
from k8s.real_bridge import GPU, bridge_on, deployment, pods_of, rejected  # noqa: E402

from accelkit.runtime.kubelet_api import deviceplugin_v1beta1_pb2 as dp  # noqa: E402
from accelkit.runtime.kubelet_api import deviceplugin_v1beta1_pb2_grpc as dp_grpc  # noqa: E402
from accelkit.runtime.kubelet_api import podresources_v1_pb2 as pr  # noqa: E402
from accelkit.runtime.kubelet_api import podresources_v1_pb2_grpc as pr_grpc  # noqa: E402

#: the folders of the bridges run here (ledger, config), removed at the end
SCRATCH: list[Path] = []


def scratch() -> Path:
    root = Path(tempfile.mkdtemp(prefix="akb-", dir="/tmp"))
    SCRATCH.append(root)
    return root


def ms(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "median_ms": round(statistics.median(ordered) * 1000, 3),
        "p95_ms": round(ordered[int(len(ordered) * 0.95) - 1] * 1000, 3),
    }


def startup(starts: int) -> tuple[list[dict[str, float]], real_cluster.Cluster]:
    real_cluster.binaries()
    rounds: list[dict[str, float]] = []
    for i in range(starts):
        cluster = real_cluster.start()
        if i == starts - 1:
            rounds.append({"start_s": round(cluster.startup_s, 2)})
            return rounds, cluster
        began = time.monotonic()
        cluster.stop()
        stopped = time.monotonic() - began
        rounds.append({"start_s": round(cluster.startup_s, 2), "stop_s": round(stopped, 2)})
    raise ValueError("--starts must be at least 1")


async def _allocate(socket: Path, calls: int) -> tuple[list[float], list[float]]:
    floor: list[float] = []
    allocate: list[float] = []
    async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
        stub: Any = dp_grpc.DevicePluginStub(channel)  # type: ignore[no-untyped-call]
        await stub.GetDevicePluginOptions(dp.Empty())  # connected
        for i in range(calls):
            began = time.perf_counter()
            await stub.GetDevicePluginOptions(dp.Empty())
            floor.append(time.perf_counter() - began)
            request = dp.AllocateRequest(
                container_requests=[dp.ContainerAllocateRequest(devices_ids=[f"cuda{i}"])]
            )
            began = time.perf_counter()
            await stub.Allocate(request)
            allocate.append(time.perf_counter() - began)
    return floor, allocate


def allocate_runs(cluster: real_cluster.Cluster, calls: int, runs: int) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    for _ in range(runs):
        root = scratch()
        with bridge_on(cluster, root, gpus=calls, grace="600", interval="5"):
            socket = cluster.device_plugin_dir / "accelkit-accelkit.io_cuda.device.sock"
            floor, allocate = asyncio.run(_allocate(socket, calls))
        f, a = ms(floor), ms(allocate)
        results.append(
            {
                "floor": f,
                "allocate": a,
                "ratio": round(a["median_ms"] / f["median_ms"], 2),
            }
        )
    return results


def rollout(cluster: real_cluster.Cluster) -> dict[str, Any]:
    root = scratch()
    with bridge_on(cluster, root, gpus=1):
        cluster.apply(deployment("bench", 1))
        first = cluster.wait_for(
            lambda: [p["metadata"]["name"] for p in pods_of(cluster, "bench")
                     if p["status"].get("phase") == "Running"],
            "the pod", 120,
        )[0]  # fmt: skip
        began = time.monotonic()
        cluster.kubectl("rollout", "restart", "deployment/bench")
        cluster.wait_for(
            lambda: [p for p in pods_of(cluster, "bench")
                     if p["status"].get("phase") == "Running" and p["metadata"]["name"] != first],
            "the new pod", 180,
        )  # fmt: skip
        took = time.monotonic() - began
        failed = rejected(pods_of(cluster, "bench"))
    return {"rejected_pods": len(failed), "new_pod_running_s": round(took, 2)}


def _holders(cluster: real_cluster.Cluster) -> dict[str, list[str]]:
    """Per GPU id, the pods whose containers PodResources lists with it."""
    with grpc.insecure_channel(f"unix://{cluster.pod_resources_socket}") as channel:
        stub: Any = pr_grpc.PodResourcesListerStub(channel)  # type: ignore[no-untyped-call]
        reply = stub.List(pr.ListPodResourcesRequest(), timeout=5)
    found: dict[str, set[str]] = {}
    for p in reply.pod_resources:
        for c in p.containers:
            for d in c.devices:
                if d.resource_name == GPU:
                    for device in d.device_ids:
                        found.setdefault(device, set()).add(p.name)
    return {device: sorted(pods) for device, pods in found.items()}


def churn(cluster: real_cluster.Cluster, seconds: float) -> dict[str, Any]:
    """8 pods over 4 GPUs; a running pod deleted (and recreated by its Deployment) every
    moment for ``seconds``: pods the kubelet rejected, GPUs listed in two pods at once."""
    root = scratch()
    deleted = samples = twice = 0
    failed: set[str] = set()
    rng = random.Random(7)
    with bridge_on(cluster, root, gpus=4, interval="1"):
        cluster.apply(deployment("churn", 8).replace('"Recreate"', '"RollingUpdate"'))
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pods = pods_of(cluster, "churn")
            failed.update(rejected(pods))
            doubled = {d: p for d, p in _holders(cluster).items() if len(p) > 1}
            samples += 1
            twice += len(doubled)
            up = [p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Running"]
            if up:
                cluster.kubectl("delete", "pod", rng.choice(up), "--wait=false")
                deleted += 1
            time.sleep(0.5)
        failed.update(rejected(pods_of(cluster, "churn")))
    return {
        "seconds": seconds,
        "pods_deleted": deleted,
        "samples": samples,
        "rejected_pods": len(failed),
        "gpus_in_two_pods": twice,
    }


def many_pods(cluster: real_cluster.Cluster, count: int) -> dict[str, Any]:
    """``count`` one-GPU pods; ``accelkit status`` 3 times while another PodResources consumer
    asks 10 times a second: bookings not ``running``, the consumer's refused calls."""
    root = scratch()
    refused: list[str] = []
    not_running = 0
    took: list[float] = []
    with bridge_on(cluster, root, gpus=count, interval="5", grace="1") as bridge:
        began = time.monotonic()
        cluster.apply(deployment("many", count))
        cluster.wait_for(
            lambda: len([p for p in pods_of(cluster, "many")
                         if p["status"].get("phase") == "Running"]) == count,
            f"{count} pods", 900, 2.0,
        )  # fmt: skip
        all_running = time.monotonic() - began
        done = threading.Event()

        def consumer() -> None:
            with grpc.insecure_channel(f"unix://{cluster.pod_resources_socket}") as channel:
                stub: Any = pr_grpc.PodResourcesListerStub(channel)  # type: ignore[no-untyped-call]
                while not done.wait(0.1):
                    try:
                        stub.List(pr.ListPodResourcesRequest(), timeout=5)
                    except grpc.RpcError as exc:
                        refused.append(str(exc.code()))

        polling = threading.Thread(target=consumer, daemon=True)
        polling.start()
        try:
            for _ in range(3):
                t0 = time.monotonic()
                rows = [w for w in bridge.workloads() if w["runtime"] == "kubelet-pods"]
                took.append(time.monotonic() - t0)
                not_running += sum(w["liveness"] != "running" for w in rows)
        finally:
            done.set()
            polling.join()
    return {
        "pods": count,
        "all_running_s": round(all_running, 1),
        "status_s": [round(t, 2) for t in took],
        "bookings_not_running": not_running,
        "consumer_calls_refused": len(refused),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--starts", type=int, default=3)
    parser.add_argument("--allocations", type=int, default=100)
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--churn", type=float, default=120.0, help="seconds of pod churn")
    parser.add_argument("--pods", type=int, default=100, help="pods judged at once (0: none)")
    parser.add_argument("--rollout", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--cluster", type=Path, default=None, help="a running cluster's DIR")
    args = parser.parse_args()
    reason = real_cluster.missing()
    if reason is not None:
        sys.exit(f"error: {reason}")
    if args.cluster is None:
        starts, cluster = startup(args.starts)
    else:
        env = real_cluster.read_env(args.cluster / "env")
        starts = []
        cluster = real_cluster.Cluster(args.cluster, env, real_cluster.binaries() / "bin", 0.0)
    try:
        runs = allocate_runs(cluster, args.allocations, args.runs)
        restart = rollout(cluster) if args.rollout else None
        churned = churn(cluster, args.churn) if args.churn else None
        many = many_pods(cluster, args.pods) if args.pods else None
    finally:
        if args.cluster is None:
            cluster.stop()
        for root in SCRATCH:
            shutil.rmtree(root, ignore_errors=True)
    ratios = [r["ratio"] for r in runs]
    print(
        json.dumps(
            {
                "resource": GPU,
                "startup": starts,
                "allocate_runs": runs,
                "allocate_ratio": {
                    "median": statistics.median(ratios),
                    "min": min(ratios),
                    "max": max(ratios),
                },
                "rollout_restart": restart,
                "churn": churned,
                "many_pods": many,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
