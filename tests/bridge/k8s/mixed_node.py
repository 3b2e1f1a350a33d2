"""One node where ``accelkit run``, the device-plugin bridge and the DRA driver share GPUs.

:class:`MixedNode` writes a node of mock GPUs whose config both bridges read (one ledger),
starts ``accelkit k8s-device-plugin`` and ``accelkit dra-driver`` on the cluster's kubelet, and
starts and stops the three kinds of holder:

- ``run``: ``accelkit run --slots cuda.device=1`` of a shell that writes the devices it got;
- ``pod``: a pod asking the device plugin for ``accelkit.io/cuda.device: 1``;
- ``claim``: a pod with a ResourceClaim (from a template) for one GPU of the DRA driver.

A run's and a device-plugin pod's workload prints ``$MOCK_CUDA_DEVICES``: what it really
got; a claim's devices are its allocation, checked against its CDI spec. :meth:`holders`
gives every live holder's devices, :meth:`booked` the ledger's, :meth:`settled` whether the
bridges advertise what the ledger holds (the device plugin's ``Unhealthy`` devices, the
driver's ``held`` taints): the design's promise that the next grant sees what is held.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accelkit.workload.ledger import Ledger

from .bridge_process import ACCELKIT, BridgeProcess
from .dra_process import DriverProcess
from .real_bridge import GPU, HOST, devices
from .real_cluster import Cluster

DRIVER = "mixed.accelkit.io"
SHOW = 'echo "got=$MOCK_CUDA_DEVICES"; exec sleep 3600'

CLASSES = f"""\
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {{name: mixed-cuda}}
spec:
  selectors:
  - cel: {{expression: 'device.driver == "{DRIVER}"'}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: mixed-gpu}}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {{deviceClassName: mixed-cuda}}
"""


def pod_body(name: str, kind: str) -> dict[str, Any]:
    """A busybox pod that prints its devices and sleeps: ``pod`` asks the device plugin,
    ``claim`` a ResourceClaim of the DRA driver."""
    container: dict[str, Any] = {
        "name": "main",
        "image": "accelkit.local/busybox:1",
        "command": ["sh", "-c", SHOW],
    }
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "containers": [container],
    }
    if kind == "pod":
        container["resources"] = {"limits": {GPU: "1"}}
    else:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "mixed-gpu"}]
        container["resources"] = {"claims": [{"name": "gpu"}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


@dataclass
class Run:
    """An ``accelkit run`` holding (or refused) one GPU; its workload writes what it got."""

    name: str
    process: subprocess.Popen[str]
    out: Path

    def got(self) -> str | None:
        try:
            text = self.out.read_text()
        except FileNotFoundError:
            return None
        return text.strip() if text.endswith("\n") else None


@dataclass
class Holders:
    """Live holders by name (``run:N``, ``pod:NAME``, ``claim:NAME``) and their devices."""

    devices: dict[str, list[str]] = field(default_factory=dict)

    def doubles(self) -> dict[str, list[str]]:
        """Each device more than one live holder has, with those holders."""
        by_device: dict[str, list[str]] = {}
        for holder, ids in self.devices.items():
            for device in ids:
                by_device.setdefault(device, []).append(holder)
        return {d: sorted(h) for d, h in by_device.items() if len(h) > 1}


class MixedNode:
    """The node, its two bridges and its holders; see the module docstring."""

    def __init__(self, cluster: Cluster, root: Path, gpus: int) -> None:
        from kubernetes import client, config

        self.cluster = cluster
        self.root = root
        self.gpus = [f"cuda{i}" for i in range(gpus)]
        (root / "devices.toml").write_text(devices(gpus))
        self.config = root / "host.toml"
        self.config.write_text(
            HOST.format(
                root=root, dp=cluster.device_plugin_dir, pr=cluster.pod_resources_socket,
                interval="0.2", grace="30", settle="1",
            )
        )  # fmt: skip
        api = config.new_client_from_config(cluster.env["KUBECONFIG"])
        self.core = client.CoreV1Api(api)
        self.resource = client.ResourceV1Api(api)
        self.ledger = Ledger(root / "state")
        self.runs: dict[str, Run] = {}
        self.pods: dict[str, str] = {}  # name -> "pod" or "claim"
        self._logs: dict[str, str] = {}
        self.bridge: BridgeProcess | None = None
        self.driver: DriverProcess | None = None

    # --- the bridges ---------------------------------------------------------------------

    def start(self) -> None:
        self.bridge = BridgeProcess(self.config)
        self.bridge.wait_event(lambda e: e["event"] == "registered" and e["resource"] == GPU)
        self.driver = DriverProcess(self.cluster, self.config, driver=DRIVER)
        self.driver.wait_event(lambda e: e.get("event") == "registered")
        self.driver.wait_event(lambda e: e.get("event") == "published")
        self.cluster.apply(CLASSES)
        self.cluster.wait_for(
            lambda: self.cluster.allocatable(GPU) == len(self.gpus), "the GPUs allocatable"
        )

    def stop(self) -> list[str]:
        """Stop every holder and both bridges; the bridges' errors, if they failed."""
        problems: list[str] = []
        for run in self.runs.values():
            _end(run.process)
        self.cluster.delete_all_pods()
        self.cluster.kubectl("delete", "resourceclaimtemplate", "mixed-gpu", check=False)
        self.cluster.kubectl("delete", "deviceclass", "mixed-cuda", check=False)
        for process in (self.driver, self.bridge):
            if process is not None:
                code, err = process.stop()
                if code != 0:
                    problems.append(f"exit {code}: {err}")
        for item in self.resource.list_resource_slice().items:
            if item.spec.driver == DRIVER:
                self.resource.delete_resource_slice(item.metadata.name)
        self.ledger.close()
        return problems

    # --- holders ---------------------------------------------------------------------------

    def start_run(self, name: str) -> Run:
        out = self.root / f"{name}.got"
        script = f'echo "$MOCK_CUDA_DEVICES" > {out}.tmp && mv {out}.tmp {out}; exec sleep 3600'
        assert self.bridge is not None
        process = subprocess.Popen(
            [*ACCELKIT, "run", "--config", str(self.config), "--slots", "cuda.device=1",
             "--", "sh", "-c", script],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=self.bridge.env,
        )  # fmt: skip
        run = Run(name, process, out)
        self.runs[name] = run
        return run

    def stop_run(self, name: str) -> None:
        _end(self.runs.pop(name).process)

    def create_pod(self, name: str, kind: str) -> None:
        self.core.create_namespaced_pod("default", pod_body(name, kind))
        self.pods[name] = kind

    def delete_pod(self, name: str) -> None:
        """Delete the pod and wait until it and its claims are gone."""
        from kubernetes.client.exceptions import ApiException

        try:
            self.core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
        except ApiException as exc:
            if exc.status != 404:
                raise
        self.pods.pop(name, None)
        self._logs.pop(name, None)
        self.cluster.wait_for(lambda: not self._exists(name), f"pod {name} to go", 120.0, 0.05)
        self.cluster.wait_for(
            lambda: not self.claims_of(name), f"the claims of {name} to go", 120.0, 0.05
        )

    def _exists(self, name: str) -> bool:
        return any(p.metadata.name == name for p in self.core.list_namespaced_pod("default").items)

    def pod(self, name: str) -> Any:
        return self.core.read_namespaced_pod(name, "default")

    def claims_of(self, pod: str) -> list[Any]:
        return [
            c
            for c in self.resource.list_namespaced_resource_claim("default").items
            if any(o.name == pod for o in c.metadata.owner_references or [])
        ]

    def got(self, pod: str) -> str | None:
        """What the pod's container printed (``got=...``), once it has."""
        if pod not in self._logs:
            text = self.core.read_namespaced_pod_log(pod, "default", container="main")
            if not text.endswith("\n"):
                return None
            self._logs[pod] = text.strip().removeprefix("got=")
        return self._logs[pod]

    # --- what is held ---------------------------------------------------------------------

    def holders(self) -> Holders:
        """Every live holder's devices: what each run's and device-plugin pod's workload got,
        the GPUs of each running claim pod's claim (:meth:`prepared`)."""
        found = Holders()
        for name, run in self.runs.items():
            got = run.got()
            if run.process.poll() is None and got is not None:
                found.devices[f"run:{name}"] = got.split(",")
        pods = {p.metadata.name: p for p in self.core.list_namespaced_pod("default").items}
        claims = self.resource.list_namespaced_resource_claim("default").items
        for name, kind in self.pods.items():
            item = pods.get(name)
            if item is not None and item.status.phase == "Running":
                got = self.got(name) if kind == "pod" else self.prepared(name, claims)
                if got:
                    found.devices[f"{kind}:{name}"] = got.split(",")
        return found

    def prepared(self, pod: str, claims: list[Any] | None = None) -> str | None:
        """The GPUs the pod's claim was allocated, once its CDI spec gives the same ones;
        ``None`` before. (containerd 1.6 does not apply CDI specs: the container cannot say.)"""
        if claims is None:
            claims = self.resource.list_namespaced_resource_claim("default").items
        for claim in claims:
            if any(o.name == pod for o in claim.metadata.owner_references or []):
                allocation = claim.status.allocation
                results = allocation.devices.results if allocation else []
                allocated = sorted(r.device for r in results)
                spec = sorted(self.cdi_devices(claim.metadata.uid))
                if spec and spec != allocated:
                    msg = f"claim of {pod}: allocated {allocated}, its CDI spec gives {spec}"
                    raise AssertionError(msg)
                return ",".join(spec) or None
        return None

    def cdi_devices(self, uid: str) -> list[str]:
        assert self.driver is not None
        specs = list(self.driver.cdi_dir.glob(f"*{uid}.json"))
        found: list[str] = []
        for spec in specs:
            for device in json.loads(spec.read_text())["devices"]:
                for env in device["containerEdits"].get("env", []):
                    if env.startswith("MOCK_CUDA_DEVICES="):
                        found += env.split("=", 1)[1].split(",")
        return found

    def booked(self) -> dict[str, list[tuple[str, str]]]:
        """Per GPU, the ledger's ``(runtime, workload)`` holding it."""
        found: dict[str, list[tuple[str, str]]] = {}
        for (_agent, workload), record in self.ledger.scan().records.items():
            runtime = record.handle.runtime if record.handle is not None else "?"
            for slots in record.allocation.get("cuda", {}).values():
                for device in slots:
                    found.setdefault(device, []).append((runtime, workload))
        return found

    def free(self) -> list[str]:
        booked = self.booked()
        return [gpu for gpu in self.gpus if gpu not in booked]

    def settled(self) -> str | None:
        """``None`` once both bridges advertise what the ledger holds; else what differs."""
        booked = self.booked()
        not_pods = {d for d, h in booked.items() if any(r != "kubelet-pods" for r, _ in h)}
        not_claims = {d for d, h in booked.items() if any(r != "k8s-claims" for r, _ in h)}
        assert self.bridge is not None
        unhealthy: set[str] = set()
        for event in list(self.bridge.events):
            if event.get("event") == "held":
                unhealthy.add(event["device"])
            elif event.get("event") == "free":
                unhealthy.discard(event["device"])
        if unhealthy != not_pods:
            return f"device plugin advertises {sorted(unhealthy)} Unhealthy, not {sorted(not_pods)}"
        tainted = set()
        for item in self.resource.list_resource_slice().items:
            if item.spec.driver != DRIVER:
                continue
            for device in item.spec.devices or []:
                if any(t.key == f"{DRIVER}/held" for t in device.taints or []):
                    tainted.add(device.name)
        if tainted != not_claims:
            return f"the driver taints {sorted(tainted)} held, not {sorted(not_claims)}"
        return None


def _end(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.kill(process.pid, signal.SIGKILL)
        process.wait()


@contextmanager
def mixed_node(cluster: Cluster, root: Path, gpus: int) -> Iterator[MixedNode]:
    node = MixedNode(cluster, root, gpus)
    try:
        node.start()
        yield node
    finally:
        problems = node.stop()
    assert not problems, problems


def wait(predicate: Any, what: str, timeout: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)
