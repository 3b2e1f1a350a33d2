"""The bridge as a real ``accelkit k8s-device-plugin`` process over a node of mock devices."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from accelkit.testing.cli_runner import cli_env

ACCELKIT = [sys.executable, "-c", "from accelkit.cli.app import run; run()"]

DEVICES = """\
[[kinds]]
key = "cuda"
[[kinds.devices]]
id = "cuda0"
numa-node = 0
[[kinds.devices]]
id = "cuda1"
numa-node = 0
[[kinds.devices]]
id = "cuda2"
numa-node = 1
[[kinds.devices]]
id = "cuda3"
numa-node = 1
[[kinds.devices]]
id = "mig0"
numa-node = 1
mig-profile = "1g.10gb"
[[kinds.devices]]
id = "mig1"
numa-node = 1
mig-profile = "1g.10gb"
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
[bridge.k8s]
kubelet-dir = "{root}/device-plugins"
pod-resources-socket = "{root}/pod-resources/kubelet.sock"
release-interval = "0.2"
admission-grace = "{grace}"
kubelet-settle = "0.01"
"""


class BridgeProcess:
    """``accelkit k8s-device-plugin --json`` running; its events read as they come."""

    def __init__(self, config: Path) -> None:
        self.config = config
        self.env = cli_env()
        self.process = subprocess.Popen(
            [*ACCELKIT, "k8s-device-plugin", "--config", str(config), "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
        )
        self.events: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.events.append(json.loads(line))

    def wait_event(self, predicate: Any, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in list(self.events):
                if predicate(event):
                    return event
            if self.process.poll() is not None:
                err = self.process.stderr.read() if self.process.stderr else ""
                raise AssertionError(f"the bridge exited {self.process.returncode}: {err}")
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

    def accelkit(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*ACCELKIT, args[0], "--config", str(self.config), *args[1:]],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=120,
            check=False,
        )

    def popen_accelkit(self, *args: str) -> subprocess.Popen[str]:
        """``accelkit`` in the background (``run ... -- sleep N`` holding devices)."""
        return subprocess.Popen(
            [*ACCELKIT, args[0], "--config", str(self.config), *args[1:]],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
            env=self.env,
        )

    def wait_run_workload(self, timeout: float = 60.0) -> dict[str, Any]:
        """The first workload in the ledger that the bridge did not book (a ``run``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for row in self.workloads():
                if row["runtime"] != "kubelet-pods" and row["devices"].get("cuda"):
                    return row
            time.sleep(0.1)
        raise TimeoutError("no accelkit run workload in the ledger")

    def workloads(self) -> list[dict[str, Any]]:
        result = self.accelkit("status", "--json")
        assert result.returncode == 0, result.stderr
        found: list[dict[str, Any]] = json.loads(result.stdout)
        return found


def write_node(root: Path, *, grace: str = "1", devices: str = DEVICES) -> Path:
    (root / "devices.toml").write_text(devices)
    config = root / "host.toml"
    config.write_text(HOST.format(root=root, grace=grace))
    return config
