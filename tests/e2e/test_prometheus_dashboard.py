"""The shipped Grafana dashboard against a real Prometheus scraping a real ``accelkit serve``.

A mock node plays two GPUs and a third with MIG mode on (two instances), with the cuda plugin's
metrics (``gpu-metrics = true``), split between two agents; a workload holds a GPU. Prometheus
(Debian's ``prometheus``) scrapes ``accelkit serve`` and a stand-in for DCGM exporter (its MIG
series: one per instance) every two seconds. Every panel's query and every variable of
``docs/dashboards/accelkit.json`` must return data; the DCGM joins of ``docs/metrics.md`` must
work on the MIG GPU; the served ``/metrics`` must pass ``promtool check metrics``.

Skipped, with the reason, where Prometheus is not installed; with
``ACCELKIT_REQUIRE_PROMETHEUS=1`` (CI as root) that is a failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from accelkit.testing.cli_runner import ACCELKIT, cli_env

pytestmark = pytest.mark.slow  # real accelkit serve, accelkit run and Prometheus processes

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "dashboards" / "accelkit.json"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool")
REQUIRE = "ACCELKIT_REQUIRE_PROMETHEUS"
WITHIN = 180.0  # a guard against hanging, not an assertion on time
WORKLOAD = ("--slots", "cuda.device=1", "--", "sleep", "600")
#: what Grafana puts for each variable: every value ("All"), and the rate window
VARIABLES = {"instance": ".*", "gpu": ".*", "agent": ".*", "__rate_interval": "1m"}

HOST = """\
[resource]
allocation-mode = "auto-split"
reserved-cpu = 0
reserved-mem = "0"
state-dir = "{state}"
[plugins]
allowed = ["mock"]
[plugins.config.mock]
config-file = "devices.toml"
gpu-metrics = true
[[agents]]
[agents.agent]
id = "agent-1"
[[agents]]
[agents.agent]
id = "agent-2"
"""
DEVICES = """\
[[kinds]]
key = "cpu"
[[kinds.devices]]
id = "0"
numa-node = 0
[[kinds.devices]]
id = "1"
numa-node = 0
[[kinds]]
key = "cuda"
[[kinds.devices]]
id = "cuda0"
numa-node = 0
memory = "40G"
[[kinds.devices]]
id = "cuda1"
numa-node = 0
memory = "40G"
{mig}
"""
MIG = """\
[[kinds.devices]]
id = "cuda2-mig{n}"
numa-node = 0
memory = "10G"
mig-profile = "1g.10gb"
parent = "cuda2"
"""
#: DCGM exporter's series as it exports them on this node: per MIG instance on the MIG GPU
DCGM = "".join(
    f'DCGM_FI_DEV_{field}{{gpu="{gpu}",UUID="MOCK-cuda-cuda{gpu}",device="nvidia{gpu}"{mig}}} 1\n'
    for field in ("FB_USED", "POWER_USAGE")
    for gpu, mig in (
        (0, ""),
        (1, ""),
        (2, ',GPU_I_ID="1",GPU_I_PROFILE="1g.10gb"'),
        (2, ',GPU_I_ID="2",GPU_I_PROFILE="1g.10gb"'),
    )
)


def _unavailable(reason: str) -> None:
    if os.environ.get(REQUIRE) == "1":
        pytest.fail(f"{reason} ({REQUIRE}=1: CI must run this test)")
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


def wait_until_or_none(check: Any) -> Any:
    """Poll ``check()`` until it returns something true; ``None`` at the guard."""
    deadline = time.monotonic() + WITHIN
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.2)
    return None


def wait_until(what: str, check: Any, process: subprocess.Popen[bytes] | None = None) -> Any:
    """Poll ``check()`` until it returns something true; fail naming ``what`` at the guard."""
    deadline = time.monotonic() + WITHIN
    while time.monotonic() < deadline:
        if found := check():
            return found
        if process is not None and process.poll() is not None:
            pytest.fail(f"{what}: the process ended ({process.returncode})")
        time.sleep(0.2)
    pytest.fail(f"never: {what}")


class Prometheus:
    """A Prometheus server of its own: config, data directory, a loopback port."""

    def __init__(self, base: Path, targets: dict[str, str]) -> None:
        jobs = "".join(
            f"  - job_name: {job}\n    static_configs:\n      - targets: ['{target}']\n"
            for job, target in targets.items()
        )
        config = base / "prometheus.yml"
        config.write_text(
            f"global:\n  scrape_interval: 2s\n  scrape_timeout: 2s\nscrape_configs:\n{jobs}"
        )
        self.log = (base / "prometheus.log").open("w")
        for _ in range(3):  # another process may take the free port before Prometheus does
            self.url = f"http://127.0.0.1:{free_port()}"
            self.process = subprocess.Popen(
                [
                    PROMETHEUS,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={base / 'data'}",
                    f"--web.listen-address={self.url.removeprefix('http://')}",
                ],
                stdout=self.log,
                stderr=subprocess.STDOUT,
            )
            ready = wait_until_or_none(self._ready)
            if ready == "ready":
                return
            self.process.kill()
            self.process.wait()
            if ready is None:
                break
        self.log.close()
        pytest.fail(f"Prometheus did not start: {(base / 'prometheus.log').read_text()}")

    def _ready(self) -> str | None:
        if get(f"{self.url}/-/ready")[0] == 200:
            return "ready"
        return "ended" if self.process.poll() is not None else None

    def api(self, path: str, **params: str) -> dict[str, Any]:
        status, body = get(f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}")
        assert status in (200, 400, 422), body
        found: dict[str, Any] = json.loads(body)
        return found

    def query(self, expr: str) -> dict[str, Any]:
        return self.api("query", query=expr)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=60)
        self.log.close()


class _DCGM(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = DCGM.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def substitute(text: str) -> str:
    """A query as Grafana sends it, each ``$name`` / ``${name}`` replaced."""
    for name, value in VARIABLES.items():
        text = text.replace(f"${{{name}}}", value)
        text = re.sub(rf"\${re.escape(name)}\b", value, text)
    assert "$" not in text, text
    return text


def dashboard_queries() -> tuple[dict[str, str], dict[str, str]]:
    """Each panel's queries by panel title, and each query variable's query by name."""
    found = json.loads(DASHBOARD.read_text())
    panels: dict[str, str] = {}
    row = ""
    for panel in found["panels"]:
        row = panel["title"] if panel["type"] == "row" else row
        for i, target in enumerate(panel.get("targets", [])):
            panels[f"{row}/{panel['title']}[{i}]"] = substitute(target["expr"])
    variables = {
        v["name"]: substitute(v["query"]["query"])
        for v in found["templating"]["list"]
        if v["type"] == "query"
    }
    return panels, variables


def label_values(prometheus: Prometheus, query: str) -> list[str]:
    """What ``label_values(selector, label)`` lists (Grafana asks the series API)."""
    match = re.fullmatch(r"label_values\((.+), (\w+)\)", query)
    assert match is not None, query
    series = prometheus.api("series", **{"match[]": match[1]})["data"]
    return sorted({s[match[2]] for s in series if match[2] in s})


def returns_data(prometheus: Prometheus, expr: str) -> bool:
    answer = prometheus.query(expr)
    assert answer["status"] == "success", (expr, answer)
    return bool(answer["data"]["result"])


@pytest.fixture
def node(tmp_path: Path) -> Path:
    (tmp_path / "host.toml").write_text(HOST.format(state=tmp_path / "state"))
    mig = "".join(MIG.format(n=n) for n in (1, 2))
    (tmp_path / "devices.toml").write_text(DEVICES.format(mig=mig))
    return tmp_path / "host.toml"


@pytest.fixture
def served(node: Path) -> Iterator[str]:
    """``accelkit serve`` on the node, with a workload of agent-1 holding a GPU; its address."""
    env = cli_env()
    log = node.parent / "serve.log"
    with log.open("w") as out:
        serve = subprocess.Popen(
            [*ACCELKIT, "serve", "--config", str(node), "--listen", "127.0.0.1:0"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=out,
        )
    run = subprocess.Popen(
        [*ACCELKIT, "run", "--config", str(node), "--agent", "agent-1", *WORKLOAD],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        line = wait_until(
            "accelkit serve serving",
            lambda: re.search(r"http://(127\.0\.0\.1:\d+)/", log.read_text()),
            serve,
        )
        yield line[1]
    finally:
        for process in (run, serve):
            if process.poll() is None:
                process.terminate()
                process.wait(timeout=60)


@pytest.fixture
def installed() -> None:
    """Prometheus is installed, else a skip (a failure where it is required)."""
    if not Path(PROMETHEUS).exists():
        _unavailable("Prometheus is not installed (apt-get install prometheus)")


@pytest.fixture
def prometheus(installed: None, served: str, tmp_path: Path) -> Iterator[Prometheus]:
    dcgm = ThreadingHTTPServer(("127.0.0.1", 0), _DCGM)
    threading.Thread(target=dcgm.serve_forever, daemon=True).start()
    server = Prometheus(tmp_path, {"accelkit": served, "dcgm": f"127.0.0.1:{dcgm.server_port}"})
    try:
        yield server
    finally:
        server.stop()
        dcgm.shutdown()


def test_every_panel_of_the_dashboard_returns_data(prometheus: Prometheus) -> None:
    panels, variables = dashboard_queries()
    assert len(panels) >= 10
    # the workload's held seconds, rates over two scrapes: wait for every query to answer
    silent = list(panels)

    def every_panel_answers() -> bool:
        silent[:] = [t for t in silent if not returns_data(prometheus, panels[t])]
        return not silent

    if not wait_until_or_none(every_panel_answers):
        pytest.fail(f"panels without data: {silent}")
    held = prometheus.query('accelkit_device_held_seconds_total{agent="agent-1",entry="run"}')
    assert held["data"]["result"], "the workload's held seconds"
    for name, query in variables.items():
        assert label_values(prometheus, query), name
    assert label_values(prometheus, variables["gpu"]) == ["0", "1", "2"]
    assert label_values(prometheus, variables["agent"]) == ["agent-1", "agent-2"]
    dcgm = [t for t in panels if t.startswith("GPUs (the panels of NVIDIA's DCGM")]
    assert len(dcgm) == 9  # DCGM's 8 panels (tensor pipe: memory copy), and memory free
    print(  # the figures: DCGM's panels, then accelkit's own, and the variables
        f"dashboard: DCGM exporter's panels {len(dcgm)}/{len(dcgm)}, accelkit's own "
        f"{len(panels) - len(dcgm)}/{len(panels) - len(dcgm)}, variables "
        f"{len(variables)}/{len(variables)} return data"
    )


def test_mig_gpus_have_power_and_temperature_and_agents_never_sum_temperatures(
    prometheus: Prometheus,
) -> None:
    wait_until(
        "agent series scraped", lambda: returns_data(prometheus, "accelkit_cuda_agent_power_watts")
    )
    power = prometheus.query("count by (gpu) (accelkit_cuda_device_power_watts)")["data"]["result"]
    assert sorted(s["metric"]["gpu"] for s in power) == ["0", "1", "2"]  # the MIG GPU too
    hottest = prometheus.query("max(accelkit_cuda_device_temperature_celsius)")["data"]["result"]
    agents = prometheus.query("accelkit_cuda_agent_temperature_celsius")["data"]["result"]
    assert agents
    assert all(float(a["value"][1]) <= float(hottest[0]["value"][1]) for a in agents)


def test_the_documented_dcgm_joins_work_on_a_mig_node(prometheus: Prometheus) -> None:
    both = 'up{job="dcgm"} == 1 and on () up{job="accelkit"} == 1'
    wait_until("both targets scraped", lambda: returns_data(prometheus, both))
    per_instance = (
        "accelkit_cuda_device_mem_used_bytes * on (UUID, GPU_I_ID) group_left DCGM_FI_DEV_FB_USED"
    )
    devices = prometheus.query(per_instance)["data"]["result"]
    assert sorted(s["metric"]["device"] for s in devices) == [
        "cuda0", "cuda1", "cuda2-mig1", "cuda2-mig2",
    ]  # fmt: skip
    per_gpu = "accelkit_cuda_device_power_watts * on (UUID) group_left "
    per_gpu += "max by (UUID) (DCGM_FI_DEV_POWER_USAGE)"
    gpus = prometheus.query(per_gpu)["data"]["result"]
    assert sorted(s["metric"]["device"] for s in gpus) == ["cuda0", "cuda1", "cuda2"]
    # the join the issue reported: by UUID alone, a MIG GPU's instances match many-to-many
    old = prometheus.query(
        "accelkit_cuda_device_mem_used_bytes * on (UUID) group_left DCGM_FI_DEV_FB_USED"
    )
    assert old["status"] == "error"
    assert "many-to-many" in old["error"]


def test_the_served_metrics_pass_promtool(served: str) -> None:
    if PROMTOOL is None:
        _unavailable("promtool is not installed (apt-get install prometheus)")
    assert PROMTOOL is not None
    _, text = wait_until("a scrape", lambda: (r := get(f"http://{served}/metrics"))[0] == 200 and r)
    assert "accelkit_cuda_device_power_watts" in text
    assert "accelkit_device_held_seconds_total" in text
    result = subprocess.run(
        [PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert (result.returncode, result.stdout + result.stderr) == (0, "")
