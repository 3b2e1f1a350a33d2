"""The DRA driver's NodePrepareResources latency on the real single-node cluster.

A real ``accelkit dra-driver`` process serves a node of ``--gpus`` mock GPUs on the cluster of
``../shared/k8s`` (started here, or ``--cluster DIR`` for one already running). Each claim is a
real ResourceClaim in the API server whose allocation (one GPU of the driver's pool) is written
into its status, as the scheduler would; the benchmark then calls the driver on its DRA socket
as the kubelet does, one claim per ``NodePrepareResources``, and unprepares them all after each
run. ``floor``: ``GetInfo`` on the same channel (the gRPC round trip with no work), timed
between the prepares. A first run, not reported, warms the driver up. The driver writes its CDI
specs to a tmpfs (``/dev/shm``), as ``/var/run/cdi`` is on a node. Run from the repository
root as root::

    .venv/bin/python tests/benchmarks/dra_prepare.py --gpus 24 --runs 3

Prints one JSON object: per run the median and p95 of prepare and floor in ms and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "bridge"))

from k8s import real_cluster  # noqa: E402
from k8s.dra_process import DRIVER, DriverProcess  # noqa: E402

HOST = """\
[resource]
reserved-cpu = 0
reserved-mem = "0"
state-dir = "{root}/state"
[plugins]
allowed = ["mock"]
[plugins.config.mock]
config-file = "devices.toml"
"""


def write_node(root: Path, gpus: int) -> Path:
    lines = ["[[kinds]]", 'key = "cuda"']
    for i in range(gpus):
        lines += ["[[kinds.devices]]", f'id = "cuda{i}"', f"numa-node = {i % 2}"]
    (root / "devices.toml").write_text("\n".join(lines) + "\n")
    config = root / "host.toml"
    config.write_text(HOST.format(root=root))
    return config


def make_claims(api: Any, node: str, gpus: int, run: int) -> list[Any]:
    from kubernetes import client

    made = []
    for i in range(gpus):
        body = client.ResourceV1ResourceClaim(
            metadata=client.V1ObjectMeta(name=f"bench-{run}-{i}"),
            spec=client.V1ResourceClaimSpec(
                devices=client.V1DeviceClaim(
                    requests=[
                        client.V1DeviceRequest(
                            name="gpu",
                            exactly=client.V1ExactDeviceRequest(device_class_name="bench"),
                        )
                    ]
                )
            ),
        )
        claim = api.create_namespaced_resource_claim("default", body)
        claim.status = client.V1ResourceClaimStatus(
            allocation=client.V1AllocationResult(
                devices=client.V1DeviceAllocationResult(
                    results=[
                        client.V1DeviceRequestAllocationResult(
                            driver=DRIVER, pool=node, device=f"cuda{i}", request="gpu"
                        )
                    ]
                )
            )
        )
        made.append(
            api.replace_namespaced_resource_claim_status(claim.metadata.name, "default", claim)
        )
    return made


async def measure(socket: str, claims: list[Any]) -> dict[str, float]:
    import grpc

    from accelkit.bridge.dra.api import dra_v1_pb2 as pb
    from accelkit.bridge.dra.api import dra_v1_pb2_grpc as dra_grpc
    from accelkit.bridge.dra.api import pluginregistration_v1_pb2 as reg_pb
    from accelkit.bridge.dra.api import pluginregistration_v1_pb2_grpc as reg_grpc

    prepare: list[float] = []
    floor: list[float] = []
    refs = [pb.Claim(namespace="default", name=c.metadata.name, uid=c.metadata.uid) for c in claims]
    async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
        dra: Any = dra_grpc.DRAPluginStub(channel)  # type: ignore[no-untyped-call]
        info: Any = reg_grpc.RegistrationStub(channel)  # type: ignore[no-untyped-call]
        await info.GetInfo(reg_pb.InfoRequest())  # the channel is up
        for ref in refs:
            for _ in range(3):
                started = time.perf_counter()
                await info.GetInfo(reg_pb.InfoRequest())
                floor.append(time.perf_counter() - started)
            started = time.perf_counter()
            reply = await dra.NodePrepareResources(pb.NodePrepareResourcesRequest(claims=[ref]))
            prepare.append(time.perf_counter() - started)
            error = reply.claims[ref.uid].error
            if error:
                raise RuntimeError(error)
        done = await dra.NodeUnprepareResources(pb.NodeUnprepareResourcesRequest(claims=refs))
        errors = [a.error for a in done.claims.values() if a.error]
        if errors:
            raise RuntimeError(errors[0])

    def ms(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return round(1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)

    return {
        "prepare_median_ms": round(1000 * statistics.median(prepare), 3),
        "prepare_p95_ms": ms(prepare, 0.95),
        "floor_median_ms": round(1000 * statistics.median(floor), 3),
        "floor_p95_ms": ms(floor, 0.95),
        "ratio": round(statistics.median(prepare) / statistics.median(floor), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=32)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cluster", type=Path, default=None, help="a running cluster's DIR")
    args = parser.parse_args()
    from kubernetes import client, config

    started = None
    if args.cluster is None:
        started = real_cluster.start()
        cluster = started
    else:
        env = real_cluster.read_env(args.cluster / "env")
        cluster = real_cluster.Cluster(args.cluster, env, real_cluster.binaries() / "bin", 0.0)
    root = Path(tempfile.mkdtemp(prefix="akdrb-", dir="/tmp"))
    # the CDI directory on a tmpfs, as /var/run/cdi is on a node
    cdi = Path(tempfile.mkdtemp(prefix="akdrb-cdi-", dir="/dev/shm"))
    host = write_node(root, args.gpus)
    driver = DriverProcess(cluster, host, "--interval", "5", "--cdi-dir", str(cdi))
    try:
        driver.wait_event(lambda e: e.get("event") == "registered")
        api = client.ResourceV1Api(config.new_client_from_config(cluster.env["KUBECONFIG"]))
        socket = str(Path(cluster.env["K8S_PLUGINS_DIR"]) / DRIVER / "dra.sock")
        runs = []
        for run in range(args.runs + 1):  # the first warms the driver up (lazy imports)
            claims = make_claims(api, cluster.node, args.gpus, run)
            try:
                time.sleep(2)  # the driver's watch has taken in the new claims
                measured = asyncio.run(measure(socket, claims))
                if run:
                    runs.append(measured)
            finally:
                for claim in claims:
                    api.delete_namespaced_resource_claim(claim.metadata.name, "default")
        print(json.dumps({"gpus": args.gpus, "runs": runs}, indent=2))
    finally:
        driver.stop()
        cluster.kubectl("delete", "resourceslices", "--all", check=False)
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(cdi, ignore_errors=True)
        if started is not None:
            started.stop()


if __name__ == "__main__":
    main()
