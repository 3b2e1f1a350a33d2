"""``accelkit dra-driver`` as a real process on the test cluster, over a node of mock devices."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from .bridge_process import ACCELKIT
from .real_cluster import Cluster

DRIVER = "accelkit.io"

DEVICES = """\
[[kinds]]
key = "cuda"
[[kinds.devices]]
id = "cuda0"
model = "Mock GPU 40G"
memory = "40G"
numa-node = 0
[[kinds.devices]]
id = "cuda1"
model = "Mock GPU 40G"
memory = "40G"
numa-node = 1
[[kinds]]
key = "vgpu"
allocation = "fractional"
quantum = "0.05"
[[kinds.devices]]
id = "vgpu0"
model = "Mock GPU 80G"
memory = "80G"
numa-node = 0
[[kinds]]
key = "mig"
[[kinds.devices]]
id = "mg0"
model = "Mock GPU 20G"
memory = "20G"
[[kinds.devices]]
id = "mg0-1"
mig-profile = "1g.10gb"
parent = "mg0"
memory = "10G"
[[kinds.devices]]
id = "mg0-2"
mig-profile = "1g.10gb"
parent = "mg0"
memory = "10G"
"""

HOST = """\
[resource]
reserved-cpu = 0
reserved-mem = "0"
state-dir = "{root}/state"
[plugins]
allowed = ["mock"]
[plugins.config.mock]
config-file = "devices.toml"
health-interval = "0.05"
"""

SELECT = 'device.driver == "{d}" && device.attributes["{d}"].plugin == "{p}"'
CLASSES = f"""\
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {{name: accelkit-cuda}}
spec:
  selectors:
  - cel: {{expression: '{SELECT.format(d=DRIVER, p="cuda")}'}}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {{name: accelkit-vgpu}}
spec:
  selectors:
  - cel: {{expression: '{SELECT.format(d=DRIVER, p="vgpu")}'}}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {{name: accelkit-mig-gpu}}
spec:
  selectors:
  - cel: {{expression: 'device.attributes["{DRIVER}"].slot == "mig.device"'}}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {{name: accelkit-mig-1g}}
spec:
  selectors:
  - cel: {{expression: 'device.attributes["{DRIVER}"].slot == "mig.mig-1g.10gb"'}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: mig-gpu}}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {{deviceClassName: accelkit-mig-gpu}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: mig-slice}}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {{deviceClassName: accelkit-mig-1g}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: one-gpu}}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {{deviceClassName: accelkit-cuda}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: quarter-gpu}}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: accelkit-vgpu
          capacity: {{requests: {{shares: "0.25"}}}}
"""

POD = """\
apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 0
  resourceClaims: [{{name: gpu, resourceClaimTemplateName: {template}}}]
  containers:
  - name: c
    image: accelkit.local/busybox:1
    command: [sleep, "600"]
    resources: {{claims: [{{name: gpu}}]}}
"""


def write_node(root: Path) -> Path:
    (root / "devices.toml").write_text(DEVICES)
    config = root / "host.toml"
    config.write_text(HOST.format(root=root))
    return config


class DriverProcess:
    """``accelkit dra-driver --json`` running against the cluster; its events as they come."""

    def __init__(self, cluster: Cluster, config: Path, *extra: str, driver: str = DRIVER) -> None:
        self.cluster = cluster
        self.config = config
        self.cdi_dir = config.parent / "cdi"
        env = {k: v for k, v in cluster.process_env().items() if not k.startswith("ACCELKIT_")}
        self.env = env
        self.process = subprocess.Popen(
            [
                *ACCELKIT, "dra-driver", "--config", str(config), "--json",
                "--driver", driver,
                "--node-name", cluster.node,
                "--kubeconfig", cluster.env["KUBECONFIG"],
                "--registry-dir", cluster.env["K8S_PLUGINS_REGISTRY_DIR"],
                "--plugins-dir", cluster.env["K8S_PLUGINS_DIR"],
                "--cdi-dir", str(self.cdi_dir),
                "--interval", "0.2",
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )  # fmt: skip
        self.events: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.events.append(json.loads(line))

    def wait_event(self, predicate: Any, timeout: float = 60.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in list(self.events):
                if predicate(event):
                    return event
            if self.process.poll() is not None:
                err = self.process.stderr.read() if self.process.stderr else ""
                raise AssertionError(f"the driver exited {self.process.returncode}: {err}")
            time.sleep(0.02)
        raise TimeoutError(f"no such event among {self.events}")

    def stop(self) -> tuple[int, str]:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        err = self.process.stderr.read() if self.process.stderr else ""
        return self.process.returncode, err

    def workloads(self) -> list[dict[str, Any]]:
        """``accelkit status --json`` of the node."""
        result = subprocess.run(
            [*ACCELKIT, "status", "--config", str(self.config), "--json"],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        found: list[dict[str, Any]] = json.loads(result.stdout)
        return found

    def claim_bookings(self) -> list[dict[str, Any]]:
        return [w for w in self.workloads() if str(w.get("workload", "")).startswith("k8s-claim:")]


def pod_manifest(name: str, template: str) -> str:
    return POD.format(name=name, template=template)


def set_health(config: Path, device: str, health: str | None) -> None:
    """Mark a mock device unhealthy (``health``) or healthy again (``None``) in its file."""
    path = config.parent / "devices.toml"
    text = DEVICES
    if health is not None:
        text = text.replace(
            f'id = "{device}"\n',
            f'id = "{device}"\nhealth = "unhealthy"\nhealth-reason = "{health}"\n',
        )
    temp = path.with_suffix(".tmp")
    temp.write_text(text)
    os.replace(temp, path)
