"""``accelkit dra-driver`` on the real single-node cluster: the real scheduler allocates claims
from the driver's ResourceSlices and the real kubelet prepares them through the driver."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .bridge_process import ACCELKIT
from .dra_process import CLASSES, DRIVER, DriverProcess, pod_manifest, set_health, write_node
from .real_cluster import Cluster

pytestmark = pytest.mark.k8s


@pytest.fixture(scope="module")
def dra(k8s_cluster: Cluster) -> Iterator[DriverProcess]:
    """One driver for the module's tests, registered with the kubelet, its slices published."""
    root = Path(tempfile.mkdtemp(prefix="akdra-", dir="/tmp"))
    driver = DriverProcess(k8s_cluster, write_node(root))
    try:
        driver.wait_event(lambda e: e.get("event") == "registered")
        driver.wait_event(lambda e: e.get("event") == "published")
        k8s_cluster.apply(CLASSES)
        yield driver
    finally:
        k8s_cluster.delete_all_pods()
        k8s_cluster.kubectl("delete", "resourceclaims,resourceclaimtemplates,deviceclasses",
                            "--all", "--wait=false", check=False)  # fmt: skip
        code, err = driver.stop()
        k8s_cluster.kubectl("delete", "resourceslices", "--all", check=False)
        shutil.rmtree(root, ignore_errors=True)
        assert code == 0, err


def slices(cluster: Cluster, driver: str = DRIVER) -> list[dict[str, Any]]:
    return [s for s in cluster.get("resourceslices")["items"] if s["spec"]["driver"] == driver]


def devices_of(cluster: Cluster) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for s in slices(cluster) for d in s["spec"].get("devices", [])}


def unschedulable(cluster: Cluster, pod: str) -> bool:
    """The scheduler tried the pod and found no room for it."""
    conditions = cluster.get("pod", pod)["status"].get("conditions", [])
    return any(c["type"] == "PodScheduled" and c["status"] == "False" for c in conditions)


def test_the_slices_say_the_devices_their_attributes_and_shares(
    k8s_cluster: Cluster, dra: DriverProcess
) -> None:
    counters, pool = sorted(slices(k8s_cluster), key=lambda s: "devices" in s["spec"])
    assert pool["spec"]["nodeName"] == k8s_cluster.node
    assert pool["spec"]["pool"]["name"] == k8s_cluster.node
    assert pool["spec"]["pool"]["resourceSliceCount"] == 2
    assert counters["spec"]["sharedCounters"] == [
        {"name": "mg0", "counters": {"draw": {"value": str(20 << 30)}}}
    ]
    devices = devices_of(k8s_cluster)
    assert sorted(devices) == ["cuda0", "cuda1", "mg0", "mg0-1", "mg0-2", "vgpu0"]
    attributes = devices["cuda1"]["attributes"]
    assert attributes["model"] == {"string": "Mock GPU 40G"}
    assert attributes["uuid"] == {"string": "MOCK-cuda-cuda1"}
    assert attributes["numaNode"] == {"int": 1}
    assert attributes["plugin"] == {"string": "cuda"}
    assert attributes["agent"] == {"string": "agent-1"}
    assert devices["cuda1"]["capacity"] == {"memory": {"value": str(40 << 30)}}
    shared = devices["vgpu0"]
    assert shared["allowMultipleAllocations"] is True
    assert shared["capacity"]["shares"]["value"] == "1"
    assert shared["capacity"]["shares"]["requestPolicy"]["validRange"] == {"min": "50m"}


def test_a_pod_claiming_one_gpu_runs_with_it_booked_until_it_is_deleted(
    k8s_cluster: Cluster, dra: DriverProcess
) -> None:
    k8s_cluster.apply(pod_manifest("one-gpu", "one-gpu"))
    k8s_cluster.wait_for(lambda: k8s_cluster.pod_phase("one-gpu") == "Running", "the pod to run")
    [claim] = [
        c
        for c in k8s_cluster.get("resourceclaims")["items"]
        if c["metadata"]["name"].startswith("one-gpu-")
    ]
    [allocated] = claim["status"]["allocation"]["devices"]["results"]
    [booking] = dra.claim_bookings()
    uid = claim["metadata"]["uid"]
    assert booking["workload"] == f"k8s-claim:default/{claim['metadata']['name']}:{uid}"
    assert booking["runtime"] == "k8s-claims"
    assert booking["liveness"] == "running"
    assert booking["devices"] == {"cuda": [allocated["device"]]}
    spec = json.loads(next(dra.cdi_dir.glob(f"*{uid}.json")).read_text())
    assert f"MOCK_CUDA_DEVICES={allocated['device']}" in spec["devices"][0]["containerEdits"]["env"]
    refused = subprocess.run(
        [*ACCELKIT, "release", "--config", str(dra.config), booking["workload"]],
        capture_output=True, text=True, env=dra.env, timeout=120, check=False,
    )  # fmt: skip
    assert refused.returncode == 2
    assert "is still reserved for a running pod on node" in refused.stderr
    assert [b["workload"] for b in dra.claim_bookings()] == [booking["workload"]]  # kept
    k8s_cluster.kubectl("delete", "pod", "one-gpu", "--wait=true")
    k8s_cluster.wait_for(lambda: not dra.claim_bookings(), "the claim's booking to be freed")
    k8s_cluster.wait_for(lambda: not list(dra.cdi_dir.glob(f"*{uid}.json")), "its CDI spec to go")


def test_four_pods_share_one_gpu_in_quarters_and_a_fifth_waits(
    k8s_cluster: Cluster, dra: DriverProcess
) -> None:
    names = [f"quarter-{i}" for i in range(5)]
    for name in names:
        k8s_cluster.apply(pod_manifest(name, "quarter-gpu"))

    def phases() -> list[str]:
        return sorted(k8s_cluster.pod_phase(n) for n in names)

    k8s_cluster.wait_for(lambda: phases() == ["Pending"] + ["Running"] * 4, "four pods to run")
    [waiting] = [n for n in names if k8s_cluster.pod_phase(n) == "Pending"]
    # the scheduler found no room: never admitted, so never rejected by the driver
    k8s_cluster.wait_for(lambda: unschedulable(k8s_cluster, waiting), "the fifth to wait")
    bookings = dra.claim_bookings()
    assert len(bookings) == 4
    assert {json.dumps(b["amounts"], sort_keys=True) for b in bookings} == {
        json.dumps({"vgpu": {"vgpu0": "0.25"}})
    }
    leaving = next(n for n in names if n != waiting)
    k8s_cluster.kubectl("delete", "pod", leaving, "--wait=true")
    k8s_cluster.wait_for(lambda: k8s_cluster.pod_phase(waiting) == "Running", "the fifth to run")
    assert len(dra.claim_bookings()) == 4
    k8s_cluster.delete_all_pods()
    k8s_cluster.wait_for(lambda: not dra.claim_bookings(), "every booking to be freed")


def test_a_gpu_and_its_mig_instances_are_never_allocated_together(
    k8s_cluster: Cluster, dra: DriverProcess
) -> None:
    def booked_devices() -> list[str]:
        return sorted(d for b in dra.claim_bookings() for d in b["devices"].get("mig", []))

    k8s_cluster.apply(pod_manifest("mig-a", "mig-slice"))
    k8s_cluster.wait_for(lambda: k8s_cluster.pod_phase("mig-a") == "Running", "an instance")
    k8s_cluster.apply(pod_manifest("mig-whole", "mig-gpu"))
    k8s_cluster.apply(pod_manifest("mig-b", "mig-slice"))
    k8s_cluster.wait_for(lambda: k8s_cluster.pod_phase("mig-b") == "Running", "the other one")
    assert booked_devices() == ["mg0-1", "mg0-2"]
    # its instances hold the GPU's counters
    k8s_cluster.wait_for(lambda: unschedulable(k8s_cluster, "mig-whole"), "the GPU to wait")
    k8s_cluster.kubectl("delete", "pod", "mig-a", "mig-b", "--wait=true")
    k8s_cluster.wait_for(lambda: k8s_cluster.pod_phase("mig-whole") == "Running", "the GPU")
    assert booked_devices() == ["mg0"]
    k8s_cluster.apply(pod_manifest("mig-c", "mig-slice"))
    k8s_cluster.wait_for(lambda: unschedulable(k8s_cluster, "mig-c"), "an instance to wait")
    k8s_cluster.delete_all_pods()
    k8s_cluster.wait_for(lambda: not dra.claim_bookings(), "every booking to be freed")


def test_an_unhealthy_device_is_tainted_and_untainted_when_it_recovers(
    k8s_cluster: Cluster, dra: DriverProcess
) -> None:
    def taints() -> list[dict[str, Any]]:
        return list(devices_of(k8s_cluster)["cuda1"].get("taints", []))

    generation = slices(k8s_cluster)[0]["spec"]["pool"]["generation"]
    assert all(s["spec"]["pool"]["generation"] == generation for s in slices(k8s_cluster))
    flipped = time.monotonic()
    set_health(dra.config, "cuda1", "XID 79")
    seen = k8s_cluster.wait_for(taints, "the taint", every=0.02)
    latency = time.monotonic() - flipped
    assert [(t["key"], t["value"], t["effect"]) for t in seen] == [
        (f"{DRIVER}/unhealthy", "cuda1", "NoSchedule")
    ]
    assert slices(k8s_cluster)[0]["spec"]["pool"]["generation"] > generation
    assert "taints" not in devices_of(k8s_cluster)["cuda0"]
    set_health(dra.config, "cuda1", None)
    k8s_cluster.wait_for(lambda: not taints(), "the taint to go", every=0.02)
    print(f"taint latency: {latency:.3f} s from the health file's change to the slice")


def test_the_kubelet_shows_a_pods_device_health_from_the_driver(
    k8s_cluster: Cluster, dra: DriverProcess
) -> None:
    k8s_cluster.apply(pod_manifest("health", "one-gpu"))
    k8s_cluster.wait_for(lambda: k8s_cluster.pod_phase("health") == "Running", "the pod to run")
    [booking] = dra.claim_bookings()
    [device] = booking["devices"]["cuda"]

    def shown() -> list[tuple[str, str]]:
        statuses = k8s_cluster.get("pod", "health")["status"]["containerStatuses"]
        return [
            (r["health"], r.get("message", ""))
            for c in statuses
            for claim in c.get("allocatedResourcesStatus", [])
            for r in claim["resources"]
        ]

    try:
        set_health(dra.config, device, "XID 79")  # NodeWatchResources, v1alpha1
        k8s_cluster.wait_for(lambda: shown() == [("Unhealthy", "XID 79")], "the pod's status")
        set_health(dra.config, device, None)
        k8s_cluster.wait_for(lambda: shown() == [("Healthy", "")], "its recovery")
    finally:
        set_health(dra.config, device, None)
        k8s_cluster.kubectl("delete", "pod", "health", "--wait=true")
    k8s_cluster.wait_for(lambda: not dra.claim_bookings(), "the claim's booking to be freed")


def test_a_gpu_accelkit_run_holds_is_tainted_and_a_pod_gets_the_other(
    k8s_cluster: Cluster, dra: DriverProcess
) -> None:
    run = subprocess.Popen(
        [*ACCELKIT, "run", "--config", str(dra.config), "--slots", "cuda.device=1", "--",
         "sleep", "600"],
        env=dra.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        runs = k8s_cluster.wait_for(
            lambda: [w for w in dra.workloads() if w["runtime"] == "process"], "the run's booking"
        )
        held = runs[0]["devices"]["cuda"][0]

        def held_taint(device: str) -> bool:
            taints = devices_of(k8s_cluster)[device].get("taints", [])
            return any(t["key"] == f"{DRIVER}/held" for t in taints)

        k8s_cluster.wait_for(lambda: held_taint(held), "the held taint", every=0.05)
        k8s_cluster.apply(pod_manifest("beside-run", "one-gpu"))
        k8s_cluster.wait_for(
            lambda: k8s_cluster.pod_phase("beside-run") == "Running", "the pod to run"
        )
        [booking] = dra.claim_bookings()
        assert booking["devices"]["cuda"] != [held]  # given the free GPU, never refused
    finally:
        run.terminate()
        run.wait(timeout=60)
    k8s_cluster.wait_for(lambda: not held_taint(held), "the held taint to go", every=0.05)
    k8s_cluster.kubectl("delete", "pod", "beside-run", "--wait=true")
    k8s_cluster.wait_for(lambda: not dra.claim_bookings(), "the claim's booking to be freed")


def test_a_slice_name_taken_by_another_driver_is_said_and_left_alone(
    k8s_cluster: Cluster, tmp_path: Path
) -> None:
    taken = f"{k8s_cluster.node}-conflict-accelkit-io-0"
    other = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": taken},
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": k8s_cluster.node,
            "pool": {"name": "theirs", "generation": 1, "resourceSliceCount": 1},
            "devices": [],
        },
    }
    k8s_cluster.apply(json.dumps(other))
    root = Path(tempfile.mkdtemp(prefix="akdrc-", dir="/tmp"))
    driver = DriverProcess(k8s_cluster, write_node(root), driver="conflict.accelkit.io")
    try:
        warning = driver.wait_event(lambda e: "conflicts" in e.get("message", ""))
        assert warning["message"].startswith(f"ResourceSlice {taken!r} conflicts (409 Conflict")
        assert "is not driver 'conflict.accelkit.io''s on node" in warning["message"]
        theirs = k8s_cluster.get("resourceslice", taken)
        assert theirs["spec"]["driver"] == "gpu.example.com"
    finally:
        code, err = driver.stop()
        k8s_cluster.kubectl("delete", "resourceslice", taken, check=False)
        shutil.rmtree(root, ignore_errors=True)
    assert code == 0, err


def test_a_claim_naming_a_device_the_node_lacks_is_refused_and_nothing_booked(
    k8s_cluster: Cluster, dra: DriverProcess
) -> None:
    """The allocation is written by hand (the scheduler would never pick ``cuda9``): the
    kubelet asks the driver to prepare it, the driver refuses naming the device and books
    nothing, and the kubelet shows the refusal on the pod."""
    from kubernetes import client, config

    api = client.ResourceV1Api(config.new_client_from_config(k8s_cluster.env["KUBECONFIG"]))
    made = api.create_namespaced_resource_claim(
        "default",
        client.ResourceV1ResourceClaim(
            metadata=client.V1ObjectMeta(name="lacking"),
            spec=client.V1ResourceClaimSpec(
                devices=client.V1DeviceClaim(
                    requests=[
                        client.V1DeviceRequest(
                            name="gpu",
                            exactly=client.V1ExactDeviceRequest(device_class_name="accelkit-cuda"),
                        )
                    ]
                )
            ),
        ),
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "lacking"},
        "spec": {
            "nodeName": k8s_cluster.node,  # not scheduled: the claim is allocated below
            "terminationGracePeriodSeconds": 0,
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "lacking"}],
            "containers": [
                {
                    "name": "c",
                    "image": "accelkit.local/busybox:1",
                    "command": ["sleep", "600"],
                    "resources": {"claims": [{"name": "gpu"}]},
                }
            ],
        },
    }
    k8s_cluster.apply(json.dumps(pod))
    try:
        uid = k8s_cluster.get("pod", "lacking")["metadata"]["uid"]
        made.status = client.V1ResourceClaimStatus(
            allocation=client.V1AllocationResult(
                devices=client.V1DeviceAllocationResult(
                    results=[
                        client.V1DeviceRequestAllocationResult(
                            driver=DRIVER, pool=k8s_cluster.node, device="cuda9", request="gpu"
                        )
                    ]
                )
            ),
            reserved_for=[client.V1ResourceClaimConsumerReference(
                resource="pods", name="lacking", uid=uid
            )],
        )  # fmt: skip
        api.replace_namespaced_resource_claim_status("lacking", "default", made)

        def refusal() -> str:
            events = k8s_cluster.get("events", "--field-selector", "involvedObject.name=lacking")
            return next(
                (e["message"] for e in events["items"] if "does not have" in e["message"]), ""
            )

        message = k8s_cluster.wait_for(refusal, "the kubelet to show the driver's refusal")
        assert "claim default/lacking names device 'cuda9' of pool" in message
        assert k8s_cluster.pod_phase("lacking") == "Pending"
        assert dra.claim_bookings() == []
        assert not list(dra.cdi_dir.glob(f"*{made.metadata.uid}.json"))
    finally:
        k8s_cluster.kubectl("delete", "pod", "lacking", "--wait=true", check=False)
        k8s_cluster.kubectl("delete", "resourceclaim", "lacking", "--wait=false", check=False)


def test_the_documented_daemonset_rbac_and_classes_are_accepted(k8s_cluster: Cluster) -> None:
    example = Path(__file__).resolve().parents[3] / "docs" / "examples" / "k8s" / "dra-driver.yaml"
    out = k8s_cluster.kubectl("apply", "--dry-run=server", "-f", str(example))
    assert "daemonset.apps/accelkit-dra-driver created (server dry run)" in out.stdout
    assert "deviceclass.resource.k8s.io/accelkit-mig-1g-10gb created (server dry run)" in out.stdout


RESTART_DRIVER = "restart.accelkit.io"
RESTART_CLASSES = f"""\
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {{name: restart-cuda}}
spec:
  selectors:
  - cel: {{expression: 'device.driver == "{RESTART_DRIVER}"'}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: restart-gpu}}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {{deviceClassName: restart-cuda}}
"""


def test_bookings_survive_kubelet_and_driver_restarts_and_are_freed_after(
    k8s_cluster: Cluster,
) -> None:
    root = Path(tempfile.mkdtemp(prefix="akdrr-", dir="/tmp"))
    config = write_node(root)
    driver = DriverProcess(k8s_cluster, config, driver=RESTART_DRIVER)
    second: DriverProcess | None = None
    try:
        driver.wait_event(lambda e: e.get("event") == "registered")
        k8s_cluster.apply(RESTART_CLASSES)
        k8s_cluster.apply(pod_manifest("restarts", "restart-gpu"))
        k8s_cluster.wait_for(lambda: k8s_cluster.pod_phase("restarts") == "Running", "the pod")
        [booking] = driver.claim_bookings()

        registered = sum(e.get("event") == "registered" for e in driver.events)
        k8s_cluster.restart_kubelet()
        k8s_cluster.wait_for(
            lambda: sum(e.get("event") == "registered" for e in driver.events) > registered,
            "the kubelet to register the driver again",
        )
        code, err = driver.stop()
        assert code == 0, err
        second = DriverProcess(k8s_cluster, config, driver=RESTART_DRIVER)
        second.wait_event(lambda e: e.get("event") == "registered")
        [kept] = second.claim_bookings()
        assert (kept["workload"], kept["devices"], kept["liveness"]) == (
            booking["workload"],
            booking["devices"],
            "running",
        )
        assert k8s_cluster.pod_phase("restarts") == "Running"

        k8s_cluster.kubectl("delete", "pod", "restarts", "--wait=true")
        k8s_cluster.wait_for(lambda: not second.claim_bookings(), "the booking to be freed")
        assert not list(second.cdi_dir.glob("*.json"))
        k8s_cluster.apply(pod_manifest("after-restarts", "restart-gpu"))
        k8s_cluster.wait_for(
            lambda: k8s_cluster.pod_phase("after-restarts") == "Running", "a new pod to run"
        )
        k8s_cluster.kubectl("delete", "pod", "after-restarts", "--wait=true")
        k8s_cluster.wait_for(lambda: not second.claim_bookings(), "its booking to be freed")
    finally:
        for process in (driver, second):
            if process is not None:
                process.stop()
        k8s_cluster.kubectl("delete", "resourceclaimtemplate", "restart-gpu", check=False)
        k8s_cluster.kubectl("delete", "deviceclass", "restart-cuda", check=False)
        for item in slices(k8s_cluster, RESTART_DRIVER):
            k8s_cluster.kubectl("delete", "resourceslice", item["metadata"]["name"], check=False)
        shutil.rmtree(root, ignore_errors=True)
