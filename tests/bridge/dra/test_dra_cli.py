"""``accelkit dra-driver`` as a command: refusals at start, and an API server that is down."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

from accelkit.testing.cli_runner import ACCELKIT

DOWN = """\
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:9"}
users:
- name: u
  user: {token: "x"}
contexts:
- name: c
  context: {cluster: c, user: u}
current-context: c
"""


def env() -> dict[str, str]:
    return {
        k: v for k, v in os.environ.items() if not k.startswith("ACCELKIT_") and k != "KUBECONFIG"
    }


def dra_driver(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ACCELKIT, "dra-driver", "--config", str(config), *args],
        capture_output=True,
        text=True,
        env=env(),
        timeout=120,
        check=False,
    )


def test_credentials_that_cannot_be_read_are_an_error(dra_node: Path, short_root: Path) -> None:
    missing = short_root / "no-kubeconfig"
    result = dra_driver(dra_node, "--kubeconfig", str(missing))
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: cannot read the API server's credentials ({missing}):")
    assert "Traceback" not in result.stderr


def test_a_driver_name_that_is_no_dns_subdomain_is_refused(dra_node: Path) -> None:
    result = dra_driver(dra_node, "--driver", "Bad_Name")
    assert result.returncode == 2
    assert "error: Invalid value for --driver: 'Bad_Name' is not a DNS subdomain" in result.stderr


def test_an_api_server_down_is_tried_again_and_nothing_is_booked(
    dra_node: Path, short_root: Path
) -> None:
    kubeconfig = short_root / "down.kubeconfig"
    kubeconfig.write_text(DOWN)
    process = subprocess.Popen(
        [*ACCELKIT, "dra-driver", "--config", str(dra_node), "--json",
         "--kubeconfig", str(kubeconfig), "--node-name", "node-a",
         "--registry-dir", str(short_root / "registry"),
         "--plugins-dir", str(short_root / "plugins")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(),
    )  # fmt: skip
    assert process.stdout is not None
    events = []
    for line in process.stdout:
        events.append(json.loads(line))
        if sum(e["event"] == "warning" for e in events) == 2:
            break
    process.send_signal(signal.SIGTERM)
    _out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert events[0] == {
        "event": "driver",
        "driver": "accelkit.io",
        "agent": "agent-1",
        "node": "node-a",
        "devices": 3,
    }
    assert [e["message"] for e in events[1:]] == [
        "cannot reach the API server at https://127.0.0.1:9 ([Errno 111] Connection refused); "
        f"trying again in {wait} s"
        for wait in ("0.5", "1.0")
    ]
    status = subprocess.run(
        [*ACCELKIT, "status", "--config", str(dra_node), "--json"],
        capture_output=True,
        text=True,
        env=env(),
        timeout=120,
        check=True,
    )
    assert json.loads(status.stdout) == []
