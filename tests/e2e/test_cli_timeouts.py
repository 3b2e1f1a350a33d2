"""A plugin that hangs, installed for real: commands still answer, the hang is named.

The hanging fixture distribution (``tests/fixtures/hanging-plugin``) is installed into a
directory of its own and put on ``PYTHONPATH``; ``HANGING_PLUGIN_IN`` says where it hangs.
"""

from __future__ import annotations

import concurrent.futures
import json
import re
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from accelkit.testing.cli_runner import ACCELKIT, cli_env, run_accelkit

from .node_configs import beside_mock

WITHIN = 20.0  # seconds: a hang of an hour must not be waited for (the limit is 1 s)

pytestmark = pytest.mark.slow


def node_config(directory: Path, *, strict: bool = False) -> Path:
    """Mock devices plus the hanging plugin, each call limited to 1 s."""
    limits = f"call-timeout = 1\nstrict = {'true' if strict else 'false'}\n"
    return beside_mock(directory, "hanging", settings=limits)


def accelkit(
    site: Path, hang_in: str, *args: str
) -> tuple[subprocess.CompletedProcess[str], float]:
    began = time.monotonic()
    result = run_accelkit(*args, site=site, env={"HANGING_PLUGIN_IN": hang_in})
    return result, time.monotonic() - began


@pytest.mark.parametrize(
    "method",
    [
        "import",
        "accelkit_compute_plugins",
        "configurable_slots",
        "init",
        "list_devices",
        "device_slots",
    ],
)
def test_devices_answers_and_names_the_plugin_that_hangs(hanging_site, tmp_path, method):
    hang_in = "build" if method == "accelkit_compute_plugins" else method
    config = str(node_config(tmp_path))
    result, took = accelkit(hanging_site, hang_in, "devices", "--config", config, "--json")
    assert result.returncode == 0, result.stderr
    assert took < WITHIN
    assert set(json.loads(result.stdout)) == {"cpu", "mem", "cuda"}  # the mock plugins
    assert f"plugin 'hanging' timed out after 1 s in {method}" in result.stderr
    assert "Traceback" not in result.stderr


def test_plugins_json_shows_the_hanging_plugin_failed(hanging_site, tmp_path):
    config = str(node_config(tmp_path))
    result, took = accelkit(hanging_site, "init", "plugins", "--config", config, "--json")
    assert result.returncode == 0, result.stderr
    assert took < WITHIN
    records = {r["name"]: r for r in json.loads(result.stdout)}
    assert records["hanging"]["status"] == "failed"
    assert records["hanging"]["error"] == "plugin 'hanging' timed out after 1 s in init"
    assert records["mock"]["status"] == "loaded"


def test_strict_mode_makes_the_hang_a_start_up_error(hanging_site, tmp_path):
    config = str(node_config(tmp_path, strict=True))
    result, took = accelkit(hanging_site, "list_devices", "devices", "--config", config)
    assert result.returncode == 2
    assert took < WITHIN
    assert result.stderr.startswith("error: strict plugin loading: 1 plugin(s) failed")
    assert "plugin 'hanging' timed out after 1 s in list_devices" in result.stderr


def test_metrics_answers_without_the_plugin_that_hangs_in_them(hanging_site, tmp_path):
    config = str(node_config(tmp_path))
    result, took = accelkit(hanging_site, "metrics", "metrics", "--config", config, "--json")
    assert result.returncode == 0, result.stderr
    assert took < WITHIN
    data = json.loads(result.stdout)
    assert {"cpu", "mem", "cuda"} <= set(data["node"])
    assert "hang" not in data["node"]
    assert data["errors"] == {"hang": "plugin 'hang' timed out after 1 s in gather_node_metrics"}


def test_serve_metrics_answers_each_scrape_and_names_the_plugin_that_hangs(hanging_site, tmp_path):
    env = cli_env()
    env |= {"PYTHONPATH": str(hanging_site), "HANGING_PLUGIN_IN": "metrics"}
    config = str(node_config(tmp_path))
    log = tmp_path / "stderr"
    with log.open("w") as stderr:
        server = subprocess.Popen(
            [*ACCELKIT, "serve-metrics", "--port", "0", "--config", config], stderr=stderr, env=env
        )
    try:
        deadline = time.monotonic() + 120
        while (found := re.search(r"127\.0\.0\.1:(\d+)/", log.read_text())) is None:
            assert server.poll() is None, log.read_text()
            assert time.monotonic() < deadline
            time.sleep(0.1)
        url = f"http://127.0.0.1:{found.group(1)}/metrics"

        def scrape() -> tuple[int, str, float]:
            began = time.monotonic()
            with urllib.request.urlopen(url, timeout=120) as response:
                return response.status, response.read().decode(), time.monotonic() - began

        with concurrent.futures.ThreadPoolExecutor(20) as pool:
            answers = list(pool.map(lambda _: scrape(), range(20)))
    finally:
        server.terminate()
        server.wait(60)
    for status, text, took in answers:
        assert status == 200
        assert took < WITHIN
        families = {f.name: f for f in text_string_to_metric_families(text)}
        assert "accelkit_cuda_device_memory_used_bytes" in families
        assert not any(name.startswith("accelkit_hang_") for name in families)
        errors = {
            s.labels["plugin"]: s.value for s in families["accelkit_plugin_scrape_error"].samples
        }
        assert errors == {"cpu": 0, "mem": 0, "cuda": 0, "hang": 1}
